"""The outbox's pure decisions: statuses, backoff, and what a delivery's outcome leads to.

A message moves ``pending → processing → sent | failed | dead``; a retry is ``pending`` again
with ``attempts > 0``. A topic that parks unknown outcomes sends a message whose delivery
outcome is unknown to ``ambiguous`` instead of back to ``pending``: it is never re-sent until a
person or a reconcile hook says what happened. Every decision here is a function of the claimed
row and the transaction's clock reading; the dispatcher only writes what these functions return.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from ctrlrun._time import display_instant
from ctrlrun.canonical import derived_uuid
from ctrlrun.errors import InvalidArgument


class MessageStatus(StrEnum):
    """The stored statuses of an outbox message."""

    PENDING = "pending"
    PROCESSING = "processing"
    SENT = "sent"
    FAILED = "failed"
    DEAD = "dead"
    AMBIGUOUS = "ambiguous"


class OnUnknown(StrEnum):
    """What a topic does with a delivery whose outcome is unknown."""

    RETRY = "retry"  # at-least-once: send again after the backoff
    PARK = "park"  # at-most-once: park it AMBIGUOUS for reconciliation, never re-send


class Outcome(StrEnum):
    """What one delivery attempt came to, as the dispatcher observed it."""

    SENT = "sent"  # the handler returned
    NOT_EXECUTED = "not_executed"  # the handler raised NotExecuted: retry per backoff
    REJECTED = "rejected"  # the handler raised Undeliverable: never retry
    UNKNOWN = "unknown"  # any other exception, or the lease lapsed mid-delivery


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with equal jitter: attempt ``n`` waits between half and all of
    ``min(cap, base * factor ** (n - 1))``; ``fraction`` in ``[0, 1]`` picks where."""

    base: timedelta = timedelta(seconds=1)
    factor: int = 2
    cap: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        if self.base <= timedelta(0) or self.cap < self.base:
            raise InvalidArgument(f"backoff needs 0 < base <= cap, got {self.base}, {self.cap}")
        if isinstance(self.factor, bool) or not isinstance(self.factor, int) or self.factor < 1:
            raise InvalidArgument(f"backoff factor must be an integer >= 1, got {self.factor!r}")

    def ceiling(self, attempt: int) -> timedelta:
        """The un-jittered delay after failed attempt ``attempt`` (1-based)."""
        exponent = max(attempt - 1, 0)
        # compare in exponent space first: factor ** 60 seconds overflows timedelta
        if self.factor > 1 and exponent >= 64:
            return self.cap
        grown: timedelta = self.base * int(self.factor**exponent)
        return min(self.cap, grown)

    def delay(self, attempt: int, fraction: float) -> timedelta:
        """The jittered delay: ``ceiling / 2 + fraction * ceiling / 2``."""
        if not 0.0 <= fraction <= 1.0:
            raise InvalidArgument(f"jitter fraction must be within [0, 1], got {fraction!r}")
        ceiling = self.ceiling(attempt)
        return ceiling / 2 + ceiling * fraction / 2


@dataclass(frozen=True, slots=True)
class Message:
    """A stored outbox message. ``attempts`` counts claims; it is also the claim's fence."""

    message_id: str
    topic: str
    payload: Any
    dedupe_key: str | None
    status: MessageStatus
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    updated_at: datetime
    lease_expires_at: datetime | None = None
    claimed_by: str | None = None
    last_error: str | None = None
    finished_at: datetime | None = None

    @property
    def token(self) -> str:
        """The stable idempotency token of this message (the same on every attempt)."""
        return delivery_token(self.message_id)


@dataclass(frozen=True, slots=True)
class Settlement:
    """Where a claimed message goes next: its status, when it is due again, and why."""

    status: MessageStatus
    next_attempt_at: datetime | None
    error: str | None


def plan_settlement(
    outcome: Outcome,
    *,
    attempts: int,
    max_attempts: int,
    on_unknown: OnUnknown,
    backoff: Backoff,
    fraction: float,
    now: datetime,
    error: str | None = None,
) -> Settlement:
    """Decide what attempt number ``attempts`` of a message leads to.

    sent → SENT; rejected → FAILED; unknown on a parking topic → AMBIGUOUS; otherwise a retry:
    DEAD once ``attempts >= max_attempts``, else PENDING at ``now + backoff.delay(attempts)``.
    """
    if outcome is Outcome.SENT:
        return Settlement(MessageStatus.SENT, None, None)
    if outcome is Outcome.REJECTED:
        return Settlement(MessageStatus.FAILED, None, error)
    if outcome is Outcome.UNKNOWN and on_unknown is OnUnknown.PARK:
        return Settlement(MessageStatus.AMBIGUOUS, None, error)
    if attempts >= max_attempts:
        return Settlement(MessageStatus.DEAD, None, error)
    return Settlement(MessageStatus.PENDING, now + backoff.delay(attempts, fraction), error)


LAPSED_ERROR: Final = (
    "the claim of attempt {attempts} by {worker} lapsed at {expiry} before its outcome was"
    " recorded; the delivery may or may not have happened"
)


def plan_lapsed(message: Message, *, max_attempts: int, on_unknown: OnUnknown) -> Settlement:
    """A PROCESSING message whose lease lapsed: its delivery outcome is unknown.

    A parking topic parks it AMBIGUOUS; otherwise it is due again at once (the lease itself
    was the wait) or DEAD once its attempts are spent.
    """
    error = LAPSED_ERROR.format(
        attempts=message.attempts,
        worker=message.claimed_by,
        expiry=display_instant(message.lease_expires_at) if message.lease_expires_at else "never",
    )
    if on_unknown is OnUnknown.PARK:
        return Settlement(MessageStatus.AMBIGUOUS, None, error)
    if message.attempts >= max_attempts:
        return Settlement(MessageStatus.DEAD, None, error)
    return Settlement(MessageStatus.PENDING, message.lease_expires_at, error)


RESOLVABLE: Final = frozenset({MessageStatus.SENT, MessageStatus.FAILED, MessageStatus.PENDING})
SETTLED_BY_A_PERSON: Final = frozenset({MessageStatus.AMBIGUOUS, MessageStatus.DEAD})
"""Where no worker will move a message again: parked (outcome unknown) or dead (out of
attempts). Only these take a person's verdict."""


def check_resolution(message: Message | None, message_id: str, target: MessageStatus) -> None:
    """Only a parked (AMBIGUOUS) or DEAD message is resolved: to SENT (it was delivered after
    all), FAILED (it was not, and must not be) or PENDING (send it again)."""
    if target not in RESOLVABLE:
        raise InvalidArgument(f"a message resolves to sent, failed or pending, not {target}")
    if message is None:
        raise InvalidArgument(f"no outbox message {message_id}")
    if message.status not in SETTLED_BY_A_PERSON:
        raise InvalidArgument(f"message {message_id} is {message.status}, not ambiguous or dead")


def delivery_token(message_id: str) -> str:
    """A deterministic UUID (version 8) for ``message_id``: a provider's idempotency key that is
    the same on every delivery attempt of one message."""
    if not isinstance(message_id, str) or not message_id:
        raise InvalidArgument("message_id must be a non-empty string")
    return derived_uuid({"schema": "ctrlrun.outbox/v1", "message_id": message_id})
