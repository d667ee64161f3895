"""Rows of the durable tables to records, for every backend (timestamps through ``read_ts``)."""

from __future__ import annotations

import json
from typing import Any

from ctrlrun.kernel.operation import Operation, OperationStatus
from ctrlrun.kernel.outbox import Message, MessageStatus
from ctrlrun.kernel.plan import PlanRecord, PlanStatus, StepRecord, StepResult, steps_from_text
from ctrlrun.store.codec import ReadTs, Row


def _ts(read_ts: ReadTs, value: Any) -> Any:
    return None if value is None else read_ts(value)


def _json(value: Any) -> Any:
    return None if value is None else json.loads(value)


def message_from_row(row: Row, read_ts: ReadTs) -> Message:
    """A ``Message`` from an ``outbox`` row."""
    return Message(
        message_id=row["message_id"],
        topic=row["topic"],
        payload=json.loads(row["payload_json"]),
        dedupe_key=row["dedupe_key"],
        status=MessageStatus(row["status"]),
        attempts=int(row["attempts"]),
        next_attempt_at=read_ts(row["next_attempt_at"]),
        created_at=read_ts(row["created_at"]),
        updated_at=read_ts(row["updated_at"]),
        lease_expires_at=_ts(read_ts, row["lease_expires_at"]),
        claimed_by=row["claimed_by"],
        last_error=row["last_error"],
        finished_at=_ts(read_ts, row["finished_at"]),
    )


def plan_from_row(row: Row, read_ts: ReadTs) -> PlanRecord:
    """A ``PlanRecord`` from a ``plans`` row."""
    return PlanRecord(
        plan_id=row["plan_id"],
        plan_hash=row["plan_hash"],
        steps=steps_from_text(row["steps_json"]),
        agent=row["agent"],
        user=row["user_name"],
        status=PlanStatus(row["status"]),
        created_at=read_ts(row["created_at"]),
        expires_at=read_ts(row["expires_at"]),
        approver=row["approver"],
        answered_at=_ts(read_ts, row["answered_at"]),
        approved_hash=row["approved_hash"],
        claim_epoch=int(row["claim_epoch"]),
        claimed_by=row["claimed_by"],
        heartbeat_expires_at=_ts(read_ts, row["heartbeat_expires_at"]),
        started_at=_ts(read_ts, row["started_at"]),
        finished_at=_ts(read_ts, row["finished_at"]),
        next_step=int(row["next_step"]),
        interruptions=int(row["interruptions"]),
        error=row["error"],
        approval_signature=row["approval_signature"],
        answer_reason=row["answer_reason"],
    )


def step_from_row(row: Row, read_ts: ReadTs) -> StepRecord:
    """A ``StepRecord`` from a ``plan_steps`` row."""
    return StepRecord(
        plan_id=row["plan_id"],
        step_index=int(row["step_index"]),
        action=row["action"],
        result=StepResult(row["result"]),
        output=_json(row["output_json"]),
        error=row["error"],
        effect_key=row["effect_key"],
        claim_epoch=int(row["claim_epoch"]),
        receipt_id=row["receipt_id"],
        created_at=read_ts(row["created_at"]),
    )


def operation_from_row(row: Row, read_ts: ReadTs) -> Operation:
    """An ``Operation`` from an ``operations`` row."""
    return Operation(
        operation_id=row["operation_id"],
        kind=row["kind"],
        resource=row["resource"],
        arguments=json.loads(row["arguments_json"]),
        idempotency_key=row["idempotency_key"],
        status=OperationStatus(row["status"]),
        created_at=read_ts(row["created_at"]),
        updated_at=read_ts(row["updated_at"]),
        remote_id=row["remote_id"],
        claim_epoch=int(row["claim_epoch"]),
        claimed_by=row["claimed_by"],
        lease_expires_at=_ts(read_ts, row["lease_expires_at"]),
        started_at=_ts(read_ts, row["started_at"]),
        finished_at=_ts(read_ts, row["finished_at"]),
        polls=int(row["polls"]),
        reconcile=row["reconcile"],
        result=_json(row["result_json"]),
        error=row["error"],
    )
