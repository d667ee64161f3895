"""``control.approvals``: the human half of the loop for an application, a chat bot or a
console: what waits, one request, grant, deny, and the request for a given action."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus, plan_reuse, plan_waiting

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

    def grant(self, approval_id: str, approver: str) -> ApprovalRecord:
        """Grant ``approval_id`` as ``approver``: the identical call may then run, once."""
        return self._control.store.grant_approval(approval_id, approver)

    def deny(self, approval_id: str, approver: str, reason: str | None = None) -> ApprovalRecord:
        """Deny ``approval_id`` as ``approver`` (``reason`` is kept with the denial): the
        identical call is denied until the request would have expired."""
        return self._control.store.deny_approval(approval_id, approver, reason)

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
