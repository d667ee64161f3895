"""Events: the ordered log of every step an action took, written with the state it describes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    """The closed set of event types."""

    ACTION_PROPOSED = "ACTION_PROPOSED"
    POLICY_EVALUATED = "POLICY_EVALUATED"
    ACTION_DENIED = "ACTION_DENIED"
    APPROVAL_REQUESTED = "APPROVAL_REQUESTED"
    APPROVAL_GRANTED = "APPROVAL_GRANTED"
    APPROVAL_DENIED = "APPROVAL_DENIED"
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"
    APPROVAL_INVALIDATED = "APPROVAL_INVALIDATED"
    APPROVAL_CONSUMED = "APPROVAL_CONSUMED"
    APPROVAL_REUSED = "APPROVAL_REUSED"
    EFFECT_RESERVED = "EFFECT_RESERVED"
    EFFECT_RESERVATION_REFUSED = "EFFECT_RESERVATION_REFUSED"
    EFFECT_LEASE_EXPIRED = "EFFECT_LEASE_EXPIRED"
    EXECUTION_STARTED = "EXECUTION_STARTED"
    EXECUTION_COMMITTED = "EXECUTION_COMMITTED"
    EXECUTION_FAILED = "EXECUTION_FAILED"
    EXECUTION_AMBIGUOUS = "EXECUTION_AMBIGUOUS"
    EFFECT_RESOLVED = "EFFECT_RESOLVED"
    EFFECT_TEMPLATE_ACCEPTED = "EFFECT_TEMPLATE_ACCEPTED"
    RECONCILIATION_STARTED = "RECONCILIATION_STARTED"
    RECONCILIATION_RESOLVED = "RECONCILIATION_RESOLVED"
    CLOCK_SKEW_DETECTED = "CLOCK_SKEW_DETECTED"


# Not frozen, like the reservation and its plan (kernel/effect.py): a frozen dataclass sets
# each field through object.__setattr__ (~130 ns a field on 3.11), and a protected call makes
# five drafts, a plan and a reservation: 37k of ~950k instructions per call (5 December 2026).
# Never assigned after construction: a step that needs another draft makes one (``replace``).
# The protected call's five drafts are built positionally: a class called with a keyword gets
# its arguments as a dict on 3.11 (~1k instructions a call, 6 December 2026).
@dataclass(slots=True)
class EventDraft:
    """An event to append; the store assigns its id and timestamp in the same transaction."""

    type: EventType
    action_id: str | None
    effect_key: str | None = None
    approval_id: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Event:
    """A stored event. ``event_id`` increases strictly in append order within one store."""

    event_id: int
    ts: datetime
    type: EventType
    action_id: str | None
    effect_key: str | None
    approval_id: str | None
    data: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready rendering."""
        return {
            "event_id": self.event_id,
            "ts": self.ts.isoformat().replace("+00:00", "Z"),
            "type": str(self.type),
            "action_id": self.action_id,
            "effect_key": self.effect_key,
            "approval_id": self.approval_id,
            "data": dict(self.data),
        }
