"""``control.approvals``: the human half of the loop for an application, a chat bot or a
console: what waits, one request, grant, deny, and the request for a given action."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus, plan_reuse, plan_waiting
from ctrlrun.kernel.request_check import tampering
from ctrlrun.runtime.answering import refuse_if_tampered, sign_answer, split_tampered
from ctrlrun.runtime.sinks import emit_approval

if TYPE_CHECKING:
    from ctrlrun.runtime.control import Control


class Approvals:
    """Approval requests of one ``Control``'s store, answered under its policy.

    Every request is checked before it is shown or answered: its stored action must hash to
    the ``action_hash`` it binds (``kernel.request_check``). A request that does not is
    *tampered*: left out of ``pending``, refused by ``get``, ``grant`` and ``deny``
    (``ApprovalMismatch``, reason ``tampered``) and recorded as an ``APPROVAL_INVALIDATED``
    event; ``tampered`` lists them.

    ``grant`` and ``deny`` raise ``ApprovalMismatch`` for a request that is unknown, already
    answered, expired or tampered (nothing written but the tampering event) and
    ``InvalidArgument`` for an unusable approver name, reason, or missing or wrong key."""

    def __init__(self, control: Control) -> None:
        self._control = control

    def pending(self) -> tuple[ApprovalRecord, ...]:
        """Every intact request still waiting for an answer and not expired, oldest first."""
        now = self._control.now()
        store = self._control.store
        live = (r for r in store.list_approvals(ApprovalStatus.PENDING) if not r.is_expired(now))
        return split_tampered(store, live)[0]

    def tampered(self) -> tuple[ApprovalRecord, ...]:
        """Every request whose stored action no longer hashes to the action it binds, oldest
        first (any status): evidence that someone rewrote the store, never to be answered."""
        store = self._control.store
        return split_tampered(store, store.list_approvals())[1]

    def get(self, approval_id: str) -> ApprovalRecord | None:
        """The request ``approval_id``, or None; ``ApprovalMismatch`` (``tampered``) if its
        stored action does not hash to the action it binds."""
        store = self._control.store
        record = store.get_approval(approval_id)
        refuse_if_tampered(store, record)
        return record

    def grant(
        self, approval_id: str, approver: str, *, private_key: bytes | None = None
    ) -> ApprovalRecord:
        """Grant ``approval_id`` as ``approver``: the identical call may then run, once (when
        the policy asks for several approvers, once they all have). When the policy names
        approvers, ``private_key`` (``approver``'s Ed25519 key in PEM) signs the grant, over
        the hash recomputed from the stored action, and is required: ``InvalidArgument`` for
        an approver the policy does not name, a missing key, or a key that is not the
        approver's (nothing written)."""
        return self._answer(approval_id, approver, private_key, grant=True)

    def deny(
        self,
        approval_id: str,
        approver: str,
        reason: str | None = None,
        *,
        private_key: bytes | None = None,
    ) -> ApprovalRecord:
        """Deny ``approval_id`` as ``approver`` (``reason`` is kept with the denial): the
        identical call is denied until the request would have expired. When the policy names
        approvers a denial is signed too (a veto needs a key), as ``grant``."""
        return self._answer(approval_id, approver, private_key, grant=False, reason=reason)

    def _answer(
        self,
        approval_id: str,
        approver: str,
        private_key: bytes | None,
        *,
        grant: bool,
        reason: str | None = None,
    ) -> ApprovalRecord:
        store = self._control.store
        keys = self._control.refresh_policy().approvers
        record = store.get_approval(approval_id)
        refuse_if_tampered(store, record)
        signature = None
        if record is not None:  # an unknown one gets the store's own refusal below
            signature = sign_answer(keys, record, approver, private_key, grant=grant)
        if grant:
            answered = store.grant_approval(approval_id, approver, signature)
        else:
            answered = store.deny_approval(approval_id, approver, reason, signature)
        emit_approval(self._control.sinks, "granted" if grant else "denied", answered)
        return answered

    def for_action(
        self, name: str, arguments: dict[str, Any], principal: Principal
    ) -> ApprovalRecord | None:
        """The request that decides the identical call under the current policy: a usable
        grant, else a standing denial, else the pending request; None if there is none;
        ``ApprovalMismatch`` (``tampered``) if its stored action was rewritten."""
        return self.for_built(self._control.build(name, arguments, principal))

    def for_built(self, action: Action) -> ApprovalRecord | None:
        """``for_action`` for an ``Action`` already built. Reads only: a request whose stored
        action does not hash to ``action`` raises ``ApprovalMismatch`` (``tampered``), and
        the call that meets it records that."""
        control = self._control
        found = control.store.find_approvals(action.action_hash, control.policy.policy_hash)
        now = control.now()
        reuse = plan_reuse(found, now=now)
        record = reuse.granted or reuse.denied or plan_waiting(found, now)
        refusal = tampering(record) if record is not None else None
        if refusal is not None:
            raise refusal
        return record


def sign_grant(
    keys: Mapping[str, str], record: ApprovalRecord, approver: str, private_key: bytes | None
) -> str:
    """``approver``'s signature of a grant of ``record`` with ``private_key`` (required),
    checked against the approvers the policy names (``keys``, when it names any); see
    ``sign_answer``."""
    if private_key is None and not keys:
        raise InvalidArgument(f"{approver!r} must sign the grant (private_key=...)")
    signature = sign_answer(keys, record, approver, private_key, grant=True)
    assert signature is not None
    return signature
