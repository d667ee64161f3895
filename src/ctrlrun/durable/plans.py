"""Approved plans in the store: propose, approve or reject by hash, read (healing lapsed ones).

A plan is proposed ``pending`` with its frozen steps and their hash. A person approves or
rejects the whole plan by that hash before it expires; an approval is recorded with the hash it
bound to, and every later claim and every run's finish re-derives the hash from the stored
steps (the runner's steps run from the copy its claim verified). Reads heal
lazily: a plan found ``executing`` whose heartbeat lapsed is moved back to ``approved`` (a
conditional write on the stale claim) so the next run resumes it, skipping steps with receipts.
There is no background thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from ctrlrun._time import check_positive, display_instant
from ctrlrun.canonical import new_id
from ctrlrun.durable.base import DurableStore, check_name, stamp
from ctrlrun.durable.records import plan_from_row, step_from_row
from ctrlrun.errors import PlanReason, PlanRefused
from ctrlrun.kernel.approval import check_person, check_reason
from ctrlrun.kernel.plan import (
    DEFAULT_PLAN_TTL,
    INTERRUPTED_ERROR,
    PlanDecision,
    PlanRecord,
    PlanStatus,
    PlanStep,
    StepRecord,
    freeze_steps,
    plan_answer,
    plan_hash,
    steps_text,
)
from ctrlrun.store.ops import KeptRefusal, Txn


class Plans:
    """The plans of one store."""

    def __init__(self, store: DurableStore) -> None:
        self.store = store

    def propose(
        self,
        steps: Iterable[PlanStep | Mapping[str, Any]],
        *,
        agent: str,
        user: str | None = None,
        ttl: timedelta = DEFAULT_PLAN_TTL,
        plan_id: str | None = None,
    ) -> PlanRecord:
        """Record a PENDING plan of ``steps`` (frozen now, hashed in order) for ``agent``.

        ``ttl`` bounds both the approval and the start: a plan not approved and claimed within
        it expires (one that already started is never expired by the clock).
        """
        frozen = freeze_steps(steps)
        check_name(agent, "agent")
        if user is not None:
            check_name(user, "user")
        check_positive(ttl, "ttl")
        pid = check_name(plan_id, "plan_id") if plan_id is not None else new_id("pln")

        def work(txn: Txn) -> PlanRecord:
            params = stamp(
                txn,
                plan_id=pid,
                plan_hash=plan_hash(frozen),
                steps_json=steps_text(frozen),
                agent=agent,
                user_name=user,
                expires_at=txn.ts(txn.now + ttl),
                ttl_seconds=ttl.total_seconds(),
            )
            txn.run("plan_insert", params)
            record = get_plan_in_txn(txn, pid)
            assert record is not None
            return record

        return self.store.transact(work)

    def approve(
        self,
        plan_id: str,
        *,
        plan_hash: str,
        approver: str,
        signature: str | None = None,
        reason: str | None = None,
    ) -> PlanRecord:
        """PENDING → APPROVED, bound to ``plan_hash`` (what the person saw), with the
        approver's ``signature`` of ``plan_grant_message`` when the policy names approvers
        (the runner verifies it) and their ``reason`` (``check_reason``). Refused
        (``PlanRefused``) if the hash differs, the stored steps drifted, it is not pending, or
        it expired (then it is written EXPIRED first)."""
        answer = (approver, check_reason(reason))
        return self._answer(plan_id, plan_hash, answer, PlanStatus.APPROVED, signature)

    def reject(
        self,
        plan_id: str,
        *,
        approver: str,
        plan_hash: str | None = None,
        reason: str | None = None,
    ) -> PlanRecord:
        """PENDING → REJECTED (terminal), with the person's ``reason``. Without ``plan_hash``
        it rejects whatever is stored."""
        answer = (approver, check_reason(reason))
        if plan_hash is None:
            record = self.get(plan_id)
            plan_hash = record.plan_hash if record is not None else ""
        return self._answer(plan_id, plan_hash, answer, PlanStatus.REJECTED)

    def _answer(
        self,
        plan_id: str,
        presented: str,
        answer: tuple[str, str | None],
        status: PlanStatus,
        signature: str | None = None,
    ) -> PlanRecord:
        approver, reason = answer
        check_person(approver)

        def work(txn: Txn) -> PlanRecord:
            record = get_plan_in_txn(txn, plan_id)
            apply_decision_in_txn(
                txn,
                record,
                plan_answer(record, plan_id=plan_id, presented_hash=presented, now=txn.now),
            )
            assert record is not None
            params = stamp(
                txn,
                plan_id=plan_id,
                status=str(status),
                approver=approver,
                plan_hash=presented,
                approved_hash=presented if status is PlanStatus.APPROVED else None,
                signature=signature,
                reason=reason,
            )
            if txn.run("plan_answer", params) != 1:
                raise PlanRefused(
                    f"plan {plan_id} was answered concurrently",
                    reason=PlanReason.NOT_PENDING,
                    plan_id=plan_id,
                )
            answered = get_plan_in_txn(txn, plan_id)
            assert answered is not None
            return answered

        return self.store.transact(work)

    def get(self, plan_id: str, *, heal: bool = True) -> PlanRecord | None:
        """The plan, healed first if its heartbeat lapsed (a conditional write); with ``heal``
        false, as stored (a reader that may not write, e.g. ``ctrlrun plans show``)."""

        def look(txn: Txn) -> tuple[PlanRecord | None, bool]:
            record = get_plan_in_txn(txn, plan_id)
            return record, record is not None and record.heartbeat_lapsed(txn.now)

        record, lapsed = self.store.read(look)
        if not lapsed or not heal:
            return record
        return self._heal(plan_id)

    def _heal(self, plan_id: str) -> PlanRecord | None:
        return self.store.transact(lambda txn: heal_in_txn(txn, plan_id))

    def list(
        self, status: PlanStatus | str | None = None, *, heal: bool = True
    ) -> tuple[PlanRecord, ...]:
        """Plans oldest first (optionally only ``status``), each healed if its heartbeat
        lapsed (unless ``heal`` is false: then as stored)."""
        wanted = None if status is None else str(PlanStatus(status))

        def look(txn: Txn) -> tuple[tuple[PlanRecord, ...], tuple[str, ...]]:
            rows = txn.all("plan_list", {"status": wanted})
            records = tuple(plan_from_row(row, txn.read_ts) for row in rows)
            return records, tuple(r.plan_id for r in records if r.heartbeat_lapsed(txn.now))

        records, lapsed = self.store.read(look)
        if not lapsed or not heal:
            return records
        for plan_id in lapsed:
            self._heal(plan_id)
        return self.store.read(look)[0]

    def receipts(self, plan_id: str) -> tuple[StepRecord, ...]:
        """The plan's step receipts, by position."""
        return self.store.read(lambda txn: step_receipts_in_txn(txn, plan_id))


# --- work inside a transaction -------------------------------------------------------------


def get_plan_in_txn(txn: Txn, plan_id: str, *, lock: bool = False) -> PlanRecord | None:
    """The plan as this transaction sees it; with ``lock``, its row locked to the end of the
    transaction (Postgres ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` already holds it)."""
    row = txn.one("plan_lock" if lock else "plan_get", {"plan_id": plan_id})
    return None if row is None else plan_from_row(row, txn.read_ts)


def step_receipts_in_txn(txn: Txn, plan_id: str) -> tuple[StepRecord, ...]:
    """The plan's step receipts as this transaction sees them."""
    rows = txn.all("plan_step_list", {"plan_id": plan_id})
    return tuple(step_from_row(row, txn.read_ts) for row in rows)


def step_receipt_in_txn(txn: Txn, plan_id: str, step_index: int) -> StepRecord | None:
    """One position's step receipt as this transaction sees it (a primary-key lookup)."""
    row = txn.one("plan_step_get", {"plan_id": plan_id, "step_index": step_index})
    return None if row is None else step_from_row(row, txn.read_ts)


def apply_decision_in_txn(txn: Txn, record: PlanRecord | None, decision: PlanDecision) -> None:
    """Raise the decision's refusal, first writing the plan EXPIRED (a kept write) if asked."""
    if decision.refusal is None:
        return
    if decision.expire and record is not None:
        params = stamp(txn, plan_id=record.plan_id, from_status=str(record.status))
        if txn.run("plan_expire", params) == 1:
            raise KeptRefusal(decision.refusal)
    raise decision.refusal


def heal_in_txn(txn: Txn, plan_id: str) -> PlanRecord | None:
    """EXECUTING with a lapsed heartbeat → APPROVED, conditional on the stale claim; a plan
    that moved meanwhile is left as it is. Returns the plan as it now stands."""
    record = get_plan_in_txn(txn, plan_id, lock=True)
    if record is not None and record.heartbeat_lapsed(txn.now):
        error = INTERRUPTED_ERROR.format(
            epoch=record.claim_epoch,
            worker=record.claimed_by,
            expiry=(
                display_instant(record.heartbeat_expires_at) if record.heartbeat_expires_at else "-"
            ),
        )
        params = stamp(txn, plan_id=plan_id, epoch=record.claim_epoch, error=error)
        if txn.run("plan_heal", params) == 1:
            return get_plan_in_txn(txn, plan_id)
    return record
