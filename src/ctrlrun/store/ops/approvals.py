"""Approval requests, answers and consumption, inside a write transaction."""

from __future__ import annotations

import json

from ctrlrun._time import encode_instant
from ctrlrun.errors import ApprovalMismatch, MismatchReason
from ctrlrun.kernel.approval import (
    ApprovalPlan,
    ApprovalRecord,
    ApprovalRequestDraft,
    ApprovalStatus,
    plan_answer,
    plan_consume,
    plan_waiting,
)
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.store.codec import approval_from_row
from ctrlrun.store.ops import KeptRefusal, Txn
from ctrlrun.store.ops.evidence import append_events_in_txn


def get_approval_in_txn(txn: Txn, approval_id: str) -> ApprovalRecord | None:
    """The request as this transaction sees it."""
    row = txn.one("approval_get", {"approval_id": approval_id})
    return None if row is None else approval_from_row(row, txn.read_ts)


def find_approvals_in_txn(txn: Txn, action_hash: str, policy_hash: str) -> list[ApprovalRecord]:
    """Every request made for ``action_hash`` under ``policy_hash``, oldest first."""
    rows = txn.all("approval_find", {"action_hash": action_hash, "policy_hash": policy_hash})
    return [approval_from_row(row, txn.read_ts) for row in rows]


def put_approval_request_in_txn(txn: Txn, draft: ApprovalRequestDraft) -> ApprovalRecord:
    """The pending, unexpired request for the identical action under the same policy if there
    is one (with an ``APPROVAL_REUSED`` event for the asking action), else a new PENDING
    request stamped with the transaction's clock and its ``APPROVAL_REQUESTED`` event.
    Requests for one action are serialised (``approval_lock``), so no two identical calls
    both make one."""
    txn.one("approval_lock", {"action_hash": draft.action_hash})
    now = txn.now
    waiting = plan_waiting(find_approvals_in_txn(txn, draft.action_hash, draft.policy_hash), now)
    if waiting is not None:
        reused = EventDraft(
            EventType.APPROVAL_REUSED,
            draft.action.get("action_id"),
            approval_id=waiting.approval_id,
            data={"action_hash": draft.action_hash},
        )
        append_events_in_txn(txn, [reused])
        return waiting
    txn.run(
        "approval_insert",
        {
            "approval_id": draft.approval_id,
            "action_hash": draft.action_hash,
            "action_json": json.dumps(draft.action, sort_keys=True),
            "policy_hash": draft.policy_hash,
            "status": str(ApprovalStatus.PENDING),
            "created_at": txn.ts(now),
            "expires_at": txn.ts(now + draft.ttl),
        },
    )
    append_events_in_txn(
        txn,
        [
            EventDraft(
                EventType.APPROVAL_REQUESTED,
                draft.action.get("action_id"),
                approval_id=draft.approval_id,
                data={
                    "action_hash": draft.action_hash,
                    "expires_at": encode_instant(now + draft.ttl),
                },
            )
        ],
    )
    record = get_approval_in_txn(txn, draft.approval_id)
    assert record is not None
    return record


def _apply_refusal(txn: Txn, record: ApprovalRecord | None, plan: ApprovalPlan) -> None:
    if plan.refusal is None:
        return
    if plan.expire and record is not None:
        txn.run(
            "approval_set_status",
            {
                "approval_id": record.approval_id,
                "status": str(ApprovalStatus.EXPIRED),
                "from_status": str(record.status),
            },
        )
        append_events_in_txn(
            txn,
            [EventDraft(EventType.APPROVAL_EXPIRED, None, approval_id=record.approval_id)],
        )
        raise KeptRefusal(plan.refusal)
    raise plan.refusal


def answer_approval_in_txn(
    txn: Txn, *, approval_id: str, approver: str, grant: bool, reason: str | None = None
) -> ApprovalRecord:
    """PENDING → GRANTED or DENIED, if ``plan_answer`` allows; a lost race is ``answered``.
    A denial's ``reason`` goes on its ``APPROVAL_DENIED`` event."""
    record = get_approval_in_txn(txn, approval_id)
    _apply_refusal(txn, record, plan_answer(record, approval_id=approval_id, now=txn.now))
    status = ApprovalStatus.GRANTED if grant else ApprovalStatus.DENIED
    changed = txn.run(
        "approval_answer",
        {
            "approval_id": approval_id,
            "status": str(status),
            "approver": approver,
            "answered_at": txn.ts(txn.now),
        },
    )
    if changed != 1:
        raise ApprovalMismatch(
            f"approval {approval_id} was answered concurrently",
            reason=MismatchReason.ANSWERED,
            approval_id=approval_id,
        )
    kind = EventType.APPROVAL_GRANTED if grant else EventType.APPROVAL_DENIED
    data = {"approver": approver} | ({"reason": reason} if reason is not None else {})
    append_events_in_txn(txn, [EventDraft(kind, None, approval_id=approval_id, data=data)])
    answered = get_approval_in_txn(txn, approval_id)
    assert answered is not None
    return answered


def check_consumable_in_txn(
    txn: Txn, *, approval_id: str, action_hash: str, policy_hash: str | None = None
) -> ApprovalRecord:
    """The GRANTED record that may authorise ``action_hash`` under ``policy_hash`` now, or the
    refusal (an expired approval is written EXPIRED first)."""
    record = get_approval_in_txn(txn, approval_id)
    plan = plan_consume(
        record,
        approval_id=approval_id,
        action_hash=action_hash,
        now=txn.now,
        policy_hash=policy_hash,
    )
    _apply_refusal(txn, record, plan)
    assert record is not None
    return record


def consume_approval_in_txn(txn: Txn, *, approval_id: str, action_id: str) -> None:
    """GRANTED → CONSUMED by ``action_id``; a lost race is ``consumed`` (single use)."""
    changed = txn.run(
        "approval_consume",
        {"approval_id": approval_id, "consumed_at": txn.ts(txn.now), "consumed_by": action_id},
    )
    if changed != 1:
        raise ApprovalMismatch(
            f"approval {approval_id} was consumed concurrently",
            reason=MismatchReason.CONSUMED,
            approval_id=approval_id,
        )
