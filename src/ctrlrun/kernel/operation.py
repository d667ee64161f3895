"""Long-running external operations: started once, then only polled, never re-issued.

An operation moves ``queued → running → succeeded | failed | canceled``. ``queued → running``
is the one and only door to the remote start, so the start is issued at most once per
operation. Its remote id is recorded by a transition guarded on ``status = 'running'`` and the
claim; afterwards the operation is only polled. A start whose outcome is unknown leaves the
operation ``running`` without a remote id and flagged for reconciliation: it is found (by its
start token) or settled by a person, never started again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from ctrlrun.canonical import derived_uuid
from ctrlrun.errors import InvalidArgument

DEFAULT_OPERATION_LEASE: Final = timedelta(minutes=5)


class OperationStatus(StrEnum):
    """The stored statuses of an operation."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


IN_FLIGHT: Final = frozenset({OperationStatus.QUEUED, OperationStatus.RUNNING})
FINAL: Final = frozenset(
    {OperationStatus.SUCCEEDED, OperationStatus.FAILED, OperationStatus.CANCELED}
)


@dataclass(frozen=True, slots=True)
class Operation:
    """A stored operation. ``claim_epoch`` grows with every claim (start or poll) and fences
    every later write of that claim."""

    operation_id: str
    kind: str
    resource: str
    arguments: Any
    idempotency_key: str | None
    status: OperationStatus
    created_at: datetime
    updated_at: datetime
    remote_id: str | None = None
    claim_epoch: int = 0
    claimed_by: str | None = None
    lease_expires_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    polls: int = 0
    reconcile: str | None = None
    result: Any = None
    error: str | None = None

    @property
    def start_token(self) -> str:
        """The idempotency key to hand the remote when starting it, stable for this operation."""
        return start_token(self.operation_id)


class PollState(StrEnum):
    """What a poll of the remote found."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


@dataclass(frozen=True, slots=True)
class PollResult:
    """A poller's answer: the remote's state, its result or error when it finished, and the
    remote id if the poller found the operation by its start token."""

    state: PollState
    result: Any = None
    error: str | None = None
    remote_id: str | None = None  # found by the start token, when the start was unknown


class ReapAction(StrEnum):
    """What ``reap`` does with an abandoned RUNNING operation (never a restart)."""

    RELEASE = "release"  # a remote id is known: drop the dead claim, leave it to be polled
    RECONCILE = "reconcile"  # the start's outcome is unknown: flag it for reconciliation


def plan_reap(operation: Operation, now: datetime) -> ReapAction | None:
    """What to do with ``operation`` if it is abandoned (its claim lapsed), else None."""
    if operation.status is not OperationStatus.RUNNING or operation.lease_expires_at is None:
        return None
    if now <= operation.lease_expires_at:
        return None
    return ReapAction.RELEASE if operation.remote_id is not None else ReapAction.RECONCILE


UNKNOWN_START: Final = (
    "the start's outcome is unknown (claim {epoch} by {worker}); it will not be issued again:"
    " find it by its start token, or settle it"
)


def check_same_request(existing: Operation, kind: str, resource: str, arguments: Any) -> None:
    """An idempotency key reused for a different request is an error, not a silent match."""
    if (existing.kind, existing.resource, existing.arguments) != (kind, resource, arguments):
        raise InvalidArgument(
            f"idempotency key {existing.idempotency_key!r} already names operation"
            f" {existing.operation_id} ({existing.kind} on {existing.resource}) with other"
            " arguments"
        )


def start_token(operation_id: str) -> str:
    """A deterministic UUID (version 8) for ``operation_id``: the remote start's idempotency
    key, and how an unknown start is found again."""
    if not isinstance(operation_id, str) or not operation_id:
        raise InvalidArgument("operation_id must be a non-empty string")
    return derived_uuid({"schema": "ctrlrun.operation/v1", "operation_id": operation_id})
