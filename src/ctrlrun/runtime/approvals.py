"""``control.approvals``: the human half of the loop for an application, a chat bot or a
console: what waits, one request, grant, deny, and the request for a given action."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus, plan_reuse, plan_waiting
from ctrlrun.kernel.signing import public_key_text, record_message, sign
from ctrlrun.runtime.sinks import emit_approval

if TYPE_CHECKING:
    from ctrlrun.runtime.control import Control


class Approvals:
    """Approval requests of one ``Control``'s store, answered under its policy.

    ``grant`` and ``deny`` raise ``ApprovalMismatch`` for a request that is unknown, already
    answered or expired (nothing written) and ``InvalidArgument`` for an unusable approver
    name or reason."""

    def __init__(self, control: Control) -> None:
        self._control = control

    def pending(self) -> tuple[ApprovalRecord, ...]:
        """Every request still waiting for an answer and not expired, oldest first."""
        now = self._control.now()
        store = self._control.store
        return tuple(
            r for r in store.list_approvals(ApprovalStatus.PENDING) if not r.is_expired(now)
        )

    def get(self, approval_id: str) -> ApprovalRecord | None:
        """The request ``approval_id``, or None."""
        return self._control.store.get_approval(approval_id)

    def grant(
        self, approval_id: str, approver: str, *, private_key: bytes | None = None
    ) -> ApprovalRecord:
        """Grant ``approval_id`` as ``approver``: the identical call may then run, once (when
        the policy asks for several approvers, once they all have). When the policy names
        approvers, ``private_key`` (``approver``'s Ed25519 key in PEM) signs the grant and
        is required: ``InvalidArgument`` for an approver the policy does not name, a missing
        key, or a key that is not the approver's (nothing written)."""
        store = self._control.store
        keys = self._control.refresh_policy().approvers
        record = store.get_approval(approval_id) if keys or private_key is not None else None
        signature = None
        if record is not None:  # an unknown one gets the store's own refusal below
            signature = sign_grant(keys, record, approver, private_key)
        granted = store.grant_approval(approval_id, approver, signature)
        emit_approval(self._control.sinks, "granted", granted)
        return granted

    def deny(self, approval_id: str, approver: str, reason: str | None = None) -> ApprovalRecord:
        """Deny ``approval_id`` as ``approver`` (``reason`` is kept with the denial): the
        identical call is denied until the request would have expired."""
        denied = self._control.store.deny_approval(approval_id, approver, reason)
        emit_approval(self._control.sinks, "denied", denied)
        return denied

    def for_action(
        self, name: str, arguments: dict[str, Any], principal: Principal
    ) -> ApprovalRecord | None:
        """The request that decides the identical call under the current policy: a usable
        grant, else a standing denial, else the pending request; None if there is none."""
        return self.for_built(self._control.build(name, arguments, principal))

    def for_built(self, action: Action) -> ApprovalRecord | None:
        """``for_action`` for an ``Action`` already built."""
        control = self._control
        found = control.store.find_approvals(action.action_hash, control.policy.policy_hash)
        now = control.now()
        reuse = plan_reuse(found, now=now)
        return reuse.granted or reuse.denied or plan_waiting(found, now)


def sign_grant(
    keys: Mapping[str, str], record: ApprovalRecord, approver: str, private_key: bytes | None
) -> str:
    """``approver``'s signature of ``record`` with ``private_key``, checked against the
    approvers the policy names (``keys``, when it names any)."""
    if keys and approver not in keys:
        raise InvalidArgument(f"{approver!r} is not an approver the policy names")
    if private_key is None:
        raise InvalidArgument(
            f"the policy names approvers: {approver!r} must sign the grant (private_key=...)"
        )
    if keys and public_key_text(private_key) != keys[approver]:
        raise InvalidArgument(f"that private key is not the one the policy names for {approver!r}")
    return sign(private_key, record_message(record, approver))
