"""What the inbox reads and answers through: one small adapter.

SHIM (to be replaced): main does not yet have ``control.approvals`` (CONTRACTS.md, issue 16).
Until it lands, this adapter reads and answers through the store's approval methods, the same
ones ``ctrlrun approve``/``deny`` use, and builds a view of its own with the fields the
contract's ``ApprovalView`` promises (rule, controls and M-of-N are not in the store yet: shown
as unknown / 1 of 1). When ``control.approvals`` lands, ``InboxSource`` calls it instead and
``Pending`` becomes ``ApprovalView``; the pages do not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ctrlrun._time import utc_now
from ctrlrun.canonical import canonical_text
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus


@dataclass(frozen=True, slots=True)
class Pending:
    """One approval request as the inbox shows it."""

    id: str
    name: str
    arguments: dict[str, Any]
    arguments_text: str  # canonical JSON: exactly what the hash covers
    action_hash: str
    principal: Any
    rule: str | None
    controls: tuple[str, ...]
    state: str
    requested_at: datetime
    expires_at: datetime
    approvers: tuple[str, ...]
    required: int
    decided_by: str | None
    reason: str | None


def view(record: ApprovalRecord, reason: str | None = None) -> Pending:
    """The inbox's view of a stored request."""
    action = record.action
    arguments = action.get("arguments", {})
    return Pending(
        id=record.approval_id,
        name=str(action.get("name", "")),
        arguments=arguments if isinstance(arguments, dict) else {"": arguments},
        arguments_text=canonical_text(arguments),
        action_hash=record.action_hash,
        principal=action.get("principal"),
        rule=action.get("rule"),
        controls=tuple(str(c) for c in action.get("controls", ()) or ()),
        state=str(record.status),
        requested_at=record.created_at,
        expires_at=record.expires_at,
        approvers=(record.approver,) if record.approver else (),
        required=1,
        decided_by=record.approver,
        reason=reason,
    )


class InboxSource:
    """Pending requests, and the two answers, over one store."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def pending(self) -> list[Pending]:
        """Requests still waiting and not expired, newest first."""
        now = utc_now()
        records = self.store.list_approvals(ApprovalStatus.PENDING)
        live = [view(r) for r in records if not r.is_expired(now)]
        return sorted(live, key=lambda p: p.requested_at, reverse=True)

    def grant(self, approval_id: str, approver: str, action_hash: str) -> Pending:
        """Grant ``approval_id`` as ``approver``, only if it still holds the action whose hash
        the person reviewed (``action_hash``); otherwise nothing is written."""
        held = self.store.get_approval(approval_id)
        if held is not None and held.action_hash != action_hash:
            raise InvalidArgument(
                f"approval {approval_id} is for action {held.action_hash}, not the one you"
                " reviewed; nothing granted"
            )
        return view(self.store.grant_approval(approval_id, approver))

    def deny(self, approval_id: str, approver: str, reason: str) -> Pending:
        """Deny ``approval_id`` as ``approver`` with ``reason``."""
        return view(self.store.deny_approval(approval_id, approver, reason), reason)
