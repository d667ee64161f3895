"""What every surface that shows or answers an approval request does first: recompute the
action's hash from the stored document (``kernel.request_check``), record tampering as an
event, and sign an answer over the recomputed hash only.

Used by ``control.approvals``, the CLI (``approvals``, ``approve``, ``deny``), the console
and the runtime's own request path, so one rule holds everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from ctrlrun.errors import ApprovalMismatch, InvalidArgument, MismatchReason
from ctrlrun.kernel.approval import ApprovalRecord
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.request_check import recomputed_hash, tampering
from ctrlrun.kernel.signing import answer_message, public_key_text, sign
from ctrlrun.store.protocol import StateStore

TAMPERED: Final = str(MismatchReason.TAMPERED)


def tampered_event(record: ApprovalRecord) -> EventDraft:
    """``APPROVAL_INVALIDATED`` (reason ``tampered``) naming the request, the hash it binds
    and the hash its stored action recomputes to (null: it does not rebuild)."""
    data = {
        "reason": TAMPERED,
        "action_hash": record.action_hash,
        "recomputed_hash": recomputed_hash(record.action),
    }
    kind = EventType.APPROVAL_INVALIDATED
    return EventDraft(kind, None, approval_id=record.approval_id, data=data)


def refuse_if_tampered(store: StateStore, record: ApprovalRecord | None) -> None:
    """Raise the ``tampered`` refusal for ``record`` after recording it as an event (its
    own transaction: the refusal writes nothing else); nothing when it is intact or None."""
    if record is None:
        return
    refusal = tampering(record)
    if refusal is not None:
        store.record((tampered_event(record),))
        raise refusal


def split_tampered(
    store: StateStore, records: Iterable[ApprovalRecord]
) -> tuple[tuple[ApprovalRecord, ...], tuple[ApprovalRecord, ...]]:
    """``(intact, tampered)`` among ``records``; each tampered request not yet recorded as
    such gets its event (the events are read only when one is tampered)."""
    intact: list[ApprovalRecord] = []
    tampered: list[ApprovalRecord] = []
    for record in records:
        (intact if tampering(record) is None else tampered).append(record)
    if tampered:
        noted = {
            event.approval_id
            for event in store.events()
            if event.type is EventType.APPROVAL_INVALIDATED and event.data.get("reason") == TAMPERED
        }
        fresh = tuple(tampered_event(r) for r in tampered if r.approval_id not in noted)
        if fresh:
            store.record(fresh)
    return tuple(intact), tuple(tampered)


def sign_answer(
    keys: Mapping[str, str],
    record: ApprovalRecord,
    approver: str,
    private_key: bytes | None,
    *,
    grant: bool,
) -> str | None:
    """``approver``'s signature of a grant (or denial) of ``record`` with ``private_key``,
    over the hash recomputed from the stored action. When the policy names approvers
    (``keys``) every answer must be signed by one of them with the key it names:
    ``InvalidArgument`` otherwise. Without named approvers and without a key: None."""
    verb = "grant" if grant else "denial"
    if keys and approver not in keys:
        raise InvalidArgument(f"{approver!r} is not an approver the policy names")
    if private_key is None:
        if not keys:
            return None
        raise InvalidArgument(
            f"the policy names approvers: {approver!r} must sign the {verb} (private_key=...)"
        )
    if keys and public_key_text(private_key) != keys[approver]:
        raise InvalidArgument(f"that private key is not the one the policy names for {approver!r}")
    return sign(private_key, answer_message(record, approver, grant=grant))


def is_tampering(exc: BaseException) -> bool:
    """Whether ``exc`` is the ``tampered`` refusal."""
    return isinstance(exc, ApprovalMismatch) and exc.reason is MismatchReason.TAMPERED
