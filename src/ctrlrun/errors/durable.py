"""Refusals of durable work: the outbox, approved plans, long-running operations."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from ctrlrun.errors.core import NotExecuted, Refused


class Undeliverable(NotExecuted):
    """Raised by an outbox handler: the remote did nothing and never will (a permanent refusal).
    The message is FAILED at once instead of being retried."""

    def __init__(self, message: str = "the message cannot be delivered", **fields: Any) -> None:
        super().__init__(message, **fields)


class NotifyReason(StrEnum):
    """Why a notification was not sent to the target its message names (``Undeliverable``'s
    ``reason``; the message is FAILED with it in its error)."""

    UNKNOWN_TARGET = "unknown_target"  # the policy's notify: does not name the target
    NOT_SUBSCRIBED = "not_subscribed"  # the target is no longer told of this kind of event


class ClaimLost(Refused):
    """A fenced write matched no row: this worker's claim was reclaimed, or the work moved on.

    ``kind`` is ``outbox``, ``plan`` or ``operation``; ``target`` the message, plan or operation
    id; ``claim`` the attempt or epoch this worker held. Nothing was written.
    """

    kind: str
    target: str
    claim: int

    def __init__(self, message: str, *, kind: str, target: str, claim: int) -> None:
        super().__init__(message, reason="claim_lost", kind=kind, target=target, claim=claim)


class PlanReason(StrEnum):
    """Why a plan request was refused."""

    UNKNOWN = "unknown"
    HASH_MISMATCH = "hash_mismatch"
    NOT_PENDING = "not_pending"
    NOT_APPROVED = "not_approved"
    EXPIRED = "expired"
    BUSY = "busy"
    TAMPERED = "tampered"
    UNSIGNED = "unsigned"
    REQUESTER = "requester"


class PlanRefused(Refused):
    """A plan cannot be answered, claimed or run as asked. ``status`` is where it stands."""

    reason: PlanReason
    plan_id: str
    status: str | None

    def __init__(
        self, message: str, *, reason: PlanReason, plan_id: str, status: str | None = None
    ) -> None:
        super().__init__(message, reason=reason, plan_id=plan_id, status=status)


class OperationInFlight(Refused):
    """Another operation is already queued or running on ``resource``; at most one may be."""

    resource: str
    operation_id: str

    def __init__(self, message: str, *, resource: str, operation_id: str) -> None:
        super().__init__(message, reason="in_flight", resource=resource, operation_id=operation_id)
