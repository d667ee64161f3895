"""The two transactions of a protected call, composed from the effect/approval/evidence work."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctrlrun._time import iso_text
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.evidence_text import attempt_data
from ctrlrun.kernel.receipt import StoredReceipt
from ctrlrun.store.ops import Txn
from ctrlrun.store.ops.approvals import check_consumable_in_txn, consume_approval_in_txn
from ctrlrun.store.ops.budgets import charge_in_txn, give_back_in_txn
from ctrlrun.store.ops.effects import finish_effect_in_txn, reserve_in_txn
from ctrlrun.store.ops.evidence import append_events_in_txn, put_receipt_in_txn
from ctrlrun.store.ops.notices import enqueue_notices_in_txn
from ctrlrun.store.ops.templates import check_key_template_in_txn
from ctrlrun.store.protocol import FinishRequest, Started, StartRequest

# Read once, not per call: an ``EnumClass.MEMBER`` read costs ~850 instructions on 3.11
# (docs/performance.md, "Less Python per call, third pass").
_EXECUTING, _RESERVED = EffectState.EXECUTING, EffectState.RESERVED
_EFFECT_RESERVED, _EXECUTION_STARTED = EventType.EFFECT_RESERVED, EventType.EXECUTION_STARTED


def start_action_in_txn(txn: Txn, request: StartRequest) -> Started:
    """Transaction 1: check the approval and the key's template, reserve the effect, consume
    the approval, append.

    The approval is checked before the reservation (its refusal wins when both would refuse)
    and consumed after it, so a refused reservation leaves the approval GRANTED.
    """
    approval = None
    if request.approval_id is not None:
        approval = check_consumable_in_txn(
            txn,
            approval_id=request.approval_id,
            action_hash=request.action_hash or "",
            policy_hash=request.policy_hash,
            required=request.approvals_required,
            excluded=request.approvers_excluded,
            keys=request.approver_keys,
        )
    if request.effect_template is not None and request.action_name is not None:
        check_key_template_in_txn(txn, request.action_name, request.effect_template)
    reservation = None
    if request.effect_key is not None:
        reservation = reserve_in_txn(
            txn,
            effect_key=request.effect_key,
            action_id=request.action_id,
            lease=request.lease,
            max_attempts=request.max_attempts,
            state=_EXECUTING if request.execute else _RESERVED,
            announce=request.announce_ambiguous,
        )
    spent = (
        None if request.budget is None else charge_in_txn(txn, request.budget, request.action_id)
    )
    own: list[EventDraft] = []
    if approval is not None:
        consume_approval_in_txn(
            txn,
            approval_id=approval.approval_id,
            action_id=request.action_id,
            action_hash=request.action_hash or "",
        )
        own.append(
            EventDraft(
                EventType.APPROVAL_CONSUMED,
                request.action_id,
                request.effect_key,
                approval.approval_id,
                {"approver": approval.approver},
            )
        )
    attempt = reservation.attempt if reservation is not None else None
    if reservation is not None:
        own.append(
            EventDraft(
                _EFFECT_RESERVED,
                request.action_id,
                request.effect_key,
                None,
                {
                    "attempt": attempt,
                    "lease_expires_at": iso_text(reservation.lease_expires_at),
                },
            )
        )
    if request.execute:
        own.append(
            EventDraft(
                _EXECUTION_STARTED,
                request.action_id,
                request.effect_key,
                None,
                attempt_data(attempt),
            )
        )
    append_events_in_txn(txn, (*request.events, *own))
    return Started(reservation, approval, spent)


def finish_action_in_txn(txn: Txn, request: FinishRequest) -> StoredReceipt:
    """Transaction 2: the outcome, the events, the notices, the chained receipt."""
    if request.effect_key is not None and request.outcome is not None:
        finish_effect_in_txn(
            txn,
            effect_key=request.effect_key,
            action_id=request.action_id,
            attempt=request.attempt or 0,
            outcome=request.outcome,
            result=request.result,
            error=request.error,
            receipt_id=str(request.receipt["receipt_id"]),
        )
    if request.give_back_budget:
        give_back_in_txn(txn, request.action_id)
    append_events_in_txn(txn, request.events)
    enqueue_notices_in_txn(txn, request.notices)
    return put_receipt_in_txn(txn, request.receipt)


def record_in_txn(
    txn: Txn, events: tuple[EventDraft, ...], receipt: Mapping[str, Any] | None
) -> StoredReceipt | None:
    """Events and, optionally, a receipt, with nothing else."""
    append_events_in_txn(txn, events)
    return None if receipt is None else put_receipt_in_txn(txn, receipt)
