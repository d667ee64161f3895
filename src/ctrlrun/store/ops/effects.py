"""Effect reservations and transitions, inside a write transaction."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctrlrun._time import display_instant
from ctrlrun.errors import InProgress, Refused
from ctrlrun.kernel.effect import (
    LEASE_EXPIRED_ERROR,
    EffectRecord,
    EffectState,
    PlanKind,
    Reservation,
    plan_reservation,
    plan_resolution,
    plan_transition,
    resolution_error,
)
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.evidence_text import result_json
from ctrlrun.kernel.notify import NotifyKind, NotifyTarget, notices
from ctrlrun.kernel.notify_body import lapsed_event
from ctrlrun.store.codec import effect_from_row
from ctrlrun.store.ops import KeptRefusal, Txn
from ctrlrun.store.ops.budgets import give_back_in_txn
from ctrlrun.store.ops.evidence import append_events_in_txn
from ctrlrun.store.ops.notices import enqueue_notices_in_txn

# Read once, not per call: an ``EnumClass.MEMBER`` read costs ~850 instructions on 3.11
# (docs/performance.md, "Less Python per call, third pass").
_INSERT, _RENEW = PlanKind.INSERT, PlanKind.RENEW
_EXECUTING, _COMMITTED = EffectState.EXECUTING, EffectState.COMMITTED


def get_effect_in_txn(txn: Txn, effect_key: str) -> EffectRecord | None:
    """The record as this transaction sees it."""
    row = txn.one("effect_get", {"effect_key": effect_key})
    return None if row is None else effect_from_row(row, txn.read_ts)


def reserve_in_txn(
    txn: Txn,
    *,
    effect_key: str,
    action_id: str,
    lease: Any,
    max_attempts: int | None,
    state: EffectState,
    announce: tuple[NotifyTarget, ...] = (),
) -> Reservation:
    """Reserve ``effect_key`` for ``action_id`` as the planner decides, writing ``state``.
    A lapsed lease found on the way is written AMBIGUOUS, and ``announce`` (the targets told
    of ``ambiguous``) are told of it in the same transaction.

    The insert is tried first (the planner's answer for an absent record); a conflict means a
    record exists, which is read and planned against. A write that matches no row is a lost
    race: re-read and re-plan once, then refuse as in progress rather than loop.
    """
    plan = plan_reservation(
        None, effect_key=effect_key, action_id=action_id, lease=lease, now=txn.now
    )
    for _ in range(2):
        reservation = plan.reservation
        if plan.kind is _INSERT and reservation is not None:
            if _insert(txn, reservation, state):
                return reservation
        elif plan.kind is _RENEW and reservation is not None:
            if _renew(txn, reservation, state, plan):
                return reservation
        elif plan.refusal is not None:
            _refuse(txn, plan, effect_key, action_id, announce)
        plan = plan_reservation(
            get_effect_in_txn(txn, effect_key),
            effect_key=effect_key,
            action_id=action_id,
            lease=lease,
            now=txn.now,
            max_attempts=max_attempts,
        )
    if plan.refusal is not None:
        _refuse(txn, plan, effect_key, action_id, announce)
    raise InProgress(
        f"effect {effect_key!r} changed under a concurrent writer twice; refusing",
        effect_key=effect_key,
    )


def _insert(txn: Txn, reservation: Reservation, state: EffectState) -> bool:
    now = txn.ts(txn.now)
    return (
        txn.run(
            "effect_insert",
            {
                "effect_key": reservation.effect_key,
                "state": str(state),
                "action_id": reservation.action_id,
                "attempt": reservation.attempt,
                "created_at": now,
                "updated_at": now,
                "lease_expires_at": txn.ts(reservation.lease_expires_at),
            },
        )
        == 1
    )


def _renew(txn: Txn, reservation: Reservation, state: EffectState, plan: Any) -> bool:
    # conditional on the failed record's state, attempt and action (the effect planner)
    return (
        txn.run(
            "effect_renew",
            {
                "effect_key": reservation.effect_key,
                "state": str(state),
                "action_id": reservation.action_id,
                "attempt": reservation.attempt,
                "updated_at": txn.ts(txn.now),
                "lease_expires_at": txn.ts(reservation.lease_expires_at),
                "from_attempt": plan.renews_attempt,
                "from_action_id": plan.renews_action_id,
            },
        )
        == 1
    )


def _refuse(
    txn: Txn, plan: Any, effect_key: str, action_id: str, announce: tuple[NotifyTarget, ...]
) -> None:
    """Raise the plan's refusal; first write the lapsed record AMBIGUOUS (a kept write, with
    its event and the notices to ``announce``) if the plan says so."""
    refusal: Refused = plan.refusal
    if not plan.ambiguate:
        raise refusal
    record = get_effect_in_txn(txn, effect_key)
    if record is None or not record.lease_expired(txn.now):
        raise refusal  # it moved since the plan; the refusal still holds, nothing to keep
    error = LEASE_EXPIRED_ERROR.format(
        attempt=record.attempt,
        expiry=display_instant(record.lease_expires_at) if record.lease_expires_at else "never",
    )
    changed = _move(txn, record, EffectState.AMBIGUOUS, error=error, result=record.result)
    if changed:
        append_events_in_txn(
            txn,
            [
                EventDraft(
                    EventType.EFFECT_LEASE_EXPIRED,
                    record.action_id,
                    effect_key,
                    data={"attempt": record.attempt, "detected_by": action_id},
                )
            ],
        )
        event = lapsed_event(record, error=error, detected_by=action_id, at=txn.now)
        subject = f"{effect_key}/{record.attempt}"
        enqueue_notices_in_txn(txn, notices(announce, NotifyKind.AMBIGUOUS, event, subject))
        raise KeptRefusal(refusal)
    raise refusal


def _move(
    txn: Txn,
    record: EffectRecord,
    target: EffectState,
    *,
    error: str | None,
    result: Any,
    lease: Any = None,
    resolved_by: str | None = None,
) -> bool:
    """The one conditional UPDATE every later transition uses; True iff it matched the row."""
    return _move_from(
        txn,
        (record.effect_key, record.state, record.action_id, record.attempt),
        target,
        error=error,
        result=result,
        lease=lease,
        resolved_by=resolved_by,
    )


def _move_from(
    txn: Txn,
    source: tuple[str, EffectState, str, int],
    target: EffectState,
    *,
    error: str | None,
    result: Any,
    lease: Any = None,
    resolved_by: str | None = None,
    committed_receipt_id: str | None = None,
) -> bool:
    """``_move`` from ``(effect_key, state, action_id, attempt)``: the finish's first try
    needs no record read or built to state what it expects. ``committed_receipt_id`` is the
    receipt of an outcome that commits (a store whose move cannot keep it ignores it)."""
    effect_key, state, action_id, attempt = source
    return (
        txn.run(
            "effect_move",
            {
                "effect_key": effect_key,
                "state": str(target),
                "updated_at": txn.ts(txn.now),
                "lease_expires_at": lease,
                "result_json": result_json(result),
                "error": error,
                "resolved_by": resolved_by,
                "committed_receipt_id": committed_receipt_id,
                "from_state": str(state),
                "action_id": action_id,
                "attempt": attempt,
            },
        )
        == 1
    )


def finish_effect_in_txn(
    txn: Txn,
    *,
    effect_key: str,
    action_id: str,
    attempt: int,
    outcome: EffectState,
    result: Any,
    error: str | None,
    receipt_id: str | None = None,
) -> None:
    """Move this attempt's EXECUTING record to ``outcome``; raise the refusal if it cannot.
    A COMMITTED record keeps ``receipt_id``, the outcome's receipt, so a later duplicate can
    name it without searching the receipts.

    An AMBIGUOUS outcome also settles a RESERVED record, and is a no-op on a record this
    attempt already left AMBIGUOUS (marking ambiguity is idempotent).
    """
    expected = (effect_key, _EXECUTING, action_id, attempt)
    kept = receipt_id if outcome is _COMMITTED else None
    if _move_from(txn, expected, outcome, error=error, result=result, committed_receipt_id=kept):
        return
    record = get_effect_in_txn(txn, effect_key)
    ours = record is not None and record.action_id == action_id and record.attempt == attempt
    if ours and record is not None and outcome is EffectState.AMBIGUOUS:
        if record.state is EffectState.AMBIGUOUS:
            return
        if record.state is EffectState.RESERVED and _move(
            txn, record, outcome, error=error, result=result
        ):
            return
    refusal = plan_transition(
        record,
        effect_key=effect_key,
        action_id=action_id,
        attempt=attempt,
        expected=frozenset({EffectState.EXECUTING}),
        now=txn.now,
    )
    raise refusal or _lost_race(effect_key)


def begin_execution_in_txn(
    txn: Txn, *, effect_key: str, action_id: str, attempt: int
) -> EffectRecord:
    """Move this attempt's RESERVED record to EXECUTING (keeping its lease)."""
    record = get_effect_in_txn(txn, effect_key)
    refusal = plan_transition(
        record,
        effect_key=effect_key,
        action_id=action_id,
        attempt=attempt,
        expected=frozenset({EffectState.RESERVED}),
        now=txn.now,
    )
    if refusal is not None:
        raise refusal
    assert record is not None
    lease = txn.ts(record.lease_expires_at)
    if not _move(txn, record, EffectState.EXECUTING, error=None, result=None, lease=lease):
        raise _lost_race(effect_key)
    append_events_in_txn(
        txn,
        [EventDraft(EventType.EXECUTION_STARTED, action_id, effect_key, data={"attempt": attempt})],
    )
    moved = get_effect_in_txn(txn, effect_key)
    assert moved is not None
    return moved


def resolve_effect_in_txn(
    txn: Txn,
    *,
    effect_key: str,
    target: EffectState,
    resolver: str,
    by: str,
    attempt: int | None = None,
    events: Iterable[EventDraft] = (),
    reason: str | None = None,
) -> EffectRecord:
    """Move an AMBIGUOUS record to ``target`` on a human's or a hook's word.

    ``by`` is ``"human"`` or ``"reconcile"``; ``resolver`` is who, and is kept on the record.
    With ``attempt``, only that attempt is settled (``InvalidArgument`` if the record is another
    one); the conditional UPDATE keeps that check atomic with the move. ``events`` (the
    reconciliation's, say) are appended before ``EFFECT_RESOLVED``, which carries ``reason``
    when a person gave one.
    """
    record = get_effect_in_txn(txn, effect_key)
    refusal = plan_resolution(record, effect_key=effect_key, target=target, attempt=attempt)
    if refusal is not None:
        raise refusal
    assert record is not None
    error = resolution_error(record, target, resolver)
    if not _move(txn, record, target, error=error, result=record.result, resolved_by=resolver):
        raise _lost_race(effect_key)
    if target is EffectState.FAILED and record.action_id is not None:
        give_back_in_txn(txn, record.action_id)  # it did not happen: its budget charge returns
    append_events_in_txn(
        txn,
        [
            *events,
            EventDraft(
                EventType.EFFECT_RESOLVED,
                record.action_id,
                effect_key,
                data={
                    "attempt": record.attempt,
                    "state": str(target),
                    "resolver": resolver,
                    "resolved_by": by,
                }
                | ({"reason": reason} if reason is not None else {}),
            ),
        ],
    )
    moved = get_effect_in_txn(txn, effect_key)
    assert moved is not None
    return moved


def _lost_race(effect_key: str) -> InProgress:
    return InProgress(
        f"effect {effect_key!r} changed under a concurrent writer",
        effect_key=effect_key,
    )
