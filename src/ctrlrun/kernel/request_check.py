"""Whether a stored approval request still describes the action its hash binds.

A request row holds the action a person reads (``action``) and the hash a grant authorises
(``action_hash``). Anyone who can write the store could change the first and leave the
second, so a person would approve one action and sign another. Every surface that shows or
answers a request rebuilds the action from the stored document and recomputes its hash
here; a request whose hash does not come back is *tampered*: shown as such, never granted,
denied or signed. Pure: no I/O.
"""

from __future__ import annotations

from ctrlrun.errors import ApprovalMismatch, MismatchReason
from ctrlrun.kernel.action import recomputed_hash
from ctrlrun.kernel.approval import ApprovalRecord

__all__ = ["checked_hash", "is_tampered", "recomputed_hash", "tampering"]


def tampering(record: ApprovalRecord) -> ApprovalMismatch | None:
    """The refusal (reason ``tampered``) for a request whose stored action does not hash to
    its ``action_hash``; None when it does."""
    found = recomputed_hash(record.action)
    if found == record.action_hash:
        return None
    shown = "does not rebuild into an action" if found is None else f"hashes to {found}"
    return ApprovalMismatch(
        f"approval {record.approval_id} was tampered with: its stored action {shown}, not to"
        f" the {record.action_hash} it binds; it cannot be granted, denied or signed",
        reason=MismatchReason.TAMPERED,
        approval_id=record.approval_id,
    )


def is_tampered(record: ApprovalRecord) -> bool:
    """Whether ``record``'s stored action does not hash to its ``action_hash``."""
    return recomputed_hash(record.action) != record.action_hash


def checked_hash(record: ApprovalRecord) -> str:
    """The hash recomputed from ``record``'s stored action, which is what a person saw and
    what a signature may bind; raises the ``tampered`` refusal when it is not the hash the
    request binds."""
    refusal = tampering(record)
    if refusal is not None:
        raise refusal
    return record.action_hash
