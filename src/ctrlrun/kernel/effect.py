"""Effect records and the pure planners every store obeys.

An effect key names one consequence in the world (``refund:pay_123``). Its record moves through
``reserved → executing → committed | failed | ambiguous``; the absence of a record means "new".
``plan_reservation`` decides every reservation and ``plan_transition`` every later move
(docs/ARCHITECTURE.md, "The effect planner"); stores call them inside their write transaction
and then only write.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from ctrlrun.canonical import canonical_bytes
from ctrlrun.display import command_line
from ctrlrun.errors import (
    ActionDenied,
    AlreadyCommitted,
    AmbiguousEffect,
    DenyReason,
    InProgress,
    InvalidArgument,
    Refused,
)

DEFAULT_LEASE: Final = timedelta(minutes=5)
_NO_TIME: Final = timedelta(0)


class EffectState(StrEnum):
    """The stored states of an effect key."""

    RESERVED = "reserved"
    EXECUTING = "executing"
    COMMITTED = "committed"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"


LIVE_STATES: Final = frozenset({EffectState.RESERVED, EffectState.EXECUTING})
OUTCOME_STATES: Final = frozenset(
    {EffectState.COMMITTED, EffectState.FAILED, EffectState.AMBIGUOUS}
)
RESOLVABLE_TARGETS: Final = frozenset({EffectState.COMMITTED, EffectState.FAILED})


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """What a store holds for one effect key. There is deliberately no host or pid field."""

    effect_key: str
    state: EffectState
    action_id: str
    attempt: int
    created_at: datetime
    updated_at: datetime
    lease_expires_at: datetime | None = None
    result: Any = None
    error: str | None = None
    resolved_by: str | None = None
    committed_receipt_id: str | None = None
    """The receipt of the attempt that committed the effect, when the store wrote it with the
    outcome (None otherwise: not committed, committed by a person's resolution, or by a store
    that does not keep it; the receipts are then searched)."""

    def lease_is_live(self, now: datetime) -> bool:
        """True iff the record is reserved/executing with a lease that has not passed ``now``."""
        return (
            self.state in LIVE_STATES
            and self.lease_expires_at is not None
            and now <= self.lease_expires_at
        )

    def lease_expired(self, now: datetime) -> bool:
        """True iff the record is reserved/executing and its lease has lapsed (display only)."""
        return self.state in LIVE_STATES and not self.lease_is_live(now)


@dataclass(slots=True)  # not frozen, never assigned: see EventDraft (kernel/event.py)
class Reservation:
    """A granted reservation: this attempt may execute the effect until the lease expires."""

    effect_key: str
    action_id: str
    attempt: int
    lease_expires_at: datetime


class PlanKind(StrEnum):
    """How a store applies a reservation plan."""

    INSERT = "insert"  # no record: insert attempt 1
    RENEW = "renew"  # a failed record: conditional update to attempt + 1
    REFUSE = "refuse"  # raise ``refusal`` (after writing the record ambiguous if ``ambiguate``)


@dataclass(slots=True)  # not frozen, never assigned: see EventDraft (kernel/event.py)
class ReservationPlan:
    """The planner's decision. Exactly one of ``reservation`` and ``refusal`` is set."""

    kind: PlanKind
    reservation: Reservation | None = None
    refusal: Refused | None = None
    ambiguate: bool = False
    renews_attempt: int | None = None  # the failed attempt a renewal must still find
    renews_action_id: str | None = None  # and the action that attempt belonged to


# Read once, not per call: an ``EnumClass.MEMBER`` read costs ~850 instructions on 3.11
# (docs/performance.md, "Less Python per call, third pass").
_INSERT: Final = PlanKind.INSERT

LEASE_EXPIRED_ERROR: Final = (
    "the lease of attempt {attempt} expired at {expiry} before its outcome was recorded;"
    " the effect may or may not have happened"
)


def plan_reservation(
    record: EffectRecord | None,
    *,
    effect_key: str,
    action_id: str,
    lease: timedelta,
    now: datetime,
    max_attempts: int | None = None,
) -> ReservationPlan:
    """Decide a reservation of ``effect_key`` by ``action_id`` given the existing ``record``.

    Total over every state (docs/ARCHITECTURE.md, "The effect planner"): none → attempt 1;
    committed → duplicate; ambiguous → ambiguous; failed → renewal at attempt + 1 (refused as
    ``attempt_ceiling`` past ``max_attempts``); live reserved/executing → in progress, even for
    the same action_id;
    lapsed reserved/executing → write it ambiguous, then refuse as ambiguous.
    Raises ``InvalidArgument`` for an empty key or action_id or a non-positive lease.
    """
    if not effect_key or not action_id:
        raise InvalidArgument("effect_key and action_id must be non-empty")
    if lease <= _NO_TIME:
        raise InvalidArgument(f"lease must be positive, got {lease!r}")
    if record is None:
        return _grant(_INSERT, effect_key, action_id, 1, now + lease)
    if record.state is EffectState.COMMITTED:
        return _refuse(
            AlreadyCommitted(
                f"effect {effect_key!r} already committed (attempt {record.attempt})",
                effect_key=effect_key,
                result=record.result,
                receipt_id=record.committed_receipt_id,
            )
        )
    if record.state is EffectState.AMBIGUOUS:
        return _refuse(ambiguous_refusal(record))
    if record.state is EffectState.FAILED:
        attempt = record.attempt + 1
        if max_attempts is not None and attempt > max_attempts:
            return _refuse(
                ActionDenied(
                    f"effect {effect_key!r}: attempt {attempt} would exceed"
                    f" max_attempts={max_attempts}",
                    reason=DenyReason.ATTEMPT_CEILING,
                    action_id=action_id,
                )
            )
        return ReservationPlan(
            PlanKind.RENEW,
            reservation=Reservation(effect_key, action_id, attempt, now + lease),
            renews_attempt=record.attempt,
            renews_action_id=record.action_id,
        )
    if record.lease_is_live(now):
        return _refuse(
            InProgress(
                f"effect {effect_key!r} is in progress (attempt {record.attempt},"
                f" {record.action_id})",
                effect_key=effect_key,
            )
        )
    return ReservationPlan(
        PlanKind.REFUSE,
        refusal=AmbiguousEffect(
            f"effect {effect_key!r}: the lease of attempt {record.attempt} expired before its"
            " outcome was recorded; resolve it before retrying",
            effect_key=effect_key,
            action_id=record.action_id,
        ),
        ambiguate=True,
    )


def ambiguous_refusal(record: EffectRecord) -> AmbiguousEffect:
    """The refusal for a record that is AMBIGUOUS."""
    return AmbiguousEffect(
        f"effect {record.effect_key!r} is AMBIGUOUS (attempt {record.attempt}); resolve it"
        f" with `{command_line('ctrlrun', 'resolve', record.effect_key, '--committed')}` (it"
        " happened) or `--failed` (it did not) before retrying",
        effect_key=record.effect_key,
        action_id=record.action_id,
    )


def _grant(
    kind: PlanKind, key: str, action_id: str, attempt: int, expiry: datetime
) -> ReservationPlan:
    return ReservationPlan(kind, Reservation(key, action_id, attempt, expiry))


def _refuse(refusal: Refused) -> ReservationPlan:
    return ReservationPlan(PlanKind.REFUSE, refusal=refusal)


def plan_transition(
    record: EffectRecord | None,
    *,
    effect_key: str,
    action_id: str,
    attempt: int,
    expected: frozenset[EffectState],
    now: datetime,
) -> Refused | InvalidArgument | None:
    """Whether ``action_id``'s attempt may move ``record`` out of one of the ``expected`` states.

    Returns ``None`` when it may, else the exception to raise: no record or a wiring bug →
    ``InvalidArgument``; ambiguous → ``AmbiguousEffect``; committed → ``AlreadyCommitted``;
    another holder with a live lease → ``InProgress``.
    """
    if record is None:
        return InvalidArgument(f"no effect record for {effect_key!r}")
    ours = record.action_id == action_id and record.attempt == attempt
    if ours and record.state in expected:
        return None
    if record.state is EffectState.AMBIGUOUS:
        return ambiguous_refusal(record)
    if record.state is EffectState.COMMITTED:
        return AlreadyCommitted(
            f"effect {effect_key!r} already committed",
            effect_key=effect_key,
            receipt_id=record.committed_receipt_id,
        )
    if not ours and record.lease_is_live(now):
        return InProgress(
            f"effect {effect_key!r} is held by another attempt",
            effect_key=effect_key,
        )
    return InvalidArgument(
        f"effect {effect_key!r} is {record.state} (attempt {record.attempt},"
        f" {record.action_id}); attempt {attempt} of {action_id} cannot move it"
    )


def plan_resolution(
    record: EffectRecord | None,
    *,
    effect_key: str,
    target: EffectState,
    attempt: int | None = None,
) -> InvalidArgument | None:
    """Whether a human or a reconcile hook may resolve ``record`` to ``target``.

    Only an AMBIGUOUS record moves, and only to COMMITTED or FAILED; with ``attempt``, only
    while the record is still that attempt (an answer about one attempt says nothing of the
    next one, which may have executed).
    """
    if target not in RESOLVABLE_TARGETS:
        return InvalidArgument(f"an effect resolves to committed or failed, not {target!r}")
    if record is None:
        return InvalidArgument(f"no effect record for {effect_key!r}")
    if record.state is not EffectState.AMBIGUOUS:
        return InvalidArgument(
            f"effect {effect_key!r} is {record.state}, not ambiguous; only an AMBIGUOUS effect"
            " can be resolved"
        )
    if attempt is not None and record.attempt != attempt:
        return InvalidArgument(
            f"effect {effect_key!r} is attempt {record.attempt} now, not attempt {attempt};"
            " the verdict was about the earlier attempt and settles nothing else"
        )
    return None


def resolution_error(record: EffectRecord, target: EffectState, resolver: str) -> str:
    """The error text a resolution writes: who decided, and what the record said before."""
    text = f"resolved {target} by {resolver}"
    return f"{text} (was: {record.error})" if record.error else text


def idempotency_token_for(effect_key: str, attempt: int) -> str:
    """A deterministic UUID (version 8) for ``(effect_key, attempt)``, for a provider's own
    idempotency key. A renewal (attempt + 1) gets a new token; the same attempt always the same.
    """
    if not isinstance(effect_key, str) or not effect_key:
        raise InvalidArgument("effect_key must be a non-empty string")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise InvalidArgument(f"attempt must be an integer >= 1, got {attempt!r}")
    material = canonical_bytes(
        {"schema": "ctrlrun.idempotency/v1", "effect_key": effect_key, "attempt": attempt}
    )
    raw = bytearray(hashlib.sha256(material).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x80  # version 8: custom
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
    return str(uuid.UUID(bytes=bytes(raw)))
