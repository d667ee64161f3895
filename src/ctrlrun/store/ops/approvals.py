"""Approval requests, answers and consumption, inside a write transaction."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

from ctrlrun._time import encode_instant
from ctrlrun.errors import ApprovalMismatch, MismatchReason
from ctrlrun.kernel.approval import (
    ApprovalPlan,
    ApprovalRecord,
    ApprovalRequestDraft,
    ApprovalStatus,
    Grant,
    plan_answer,
    plan_consume,
    plan_grant,
    plan_quorum,
    plan_waiting,
)
from ctrlrun.kernel.budget_facts import BudgetFacts
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.notify import NotifyKind, notices
from ctrlrun.kernel.notify_body import approval_event
from ctrlrun.kernel.signing import plan_signed
from ctrlrun.store.codec import approval_from_row
from ctrlrun.store.ops import KeptRefusal, Txn
from ctrlrun.store.ops.budgets import peek_in_txn
from ctrlrun.store.ops.evidence import append_events_in_txn
from ctrlrun.store.ops.notices import enqueue_notices_in_txn


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
    both make one. A budgeted action's request records the budget's state as this
    transaction reads it (``budget`` on the event and the notification: ``BudgetFacts``)."""
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
            "required": draft.required,
            "excluded_json": json.dumps(list(draft.excluded)),
        },
    )
    data: dict[str, object] = {
        "action_hash": draft.action_hash,
        "expires_at": encode_instant(now + draft.ttl),
    }
    budget = _budget_in_txn(txn, draft)
    if budget is not None:
        data["budget"] = budget
    requested = EventDraft(
        EventType.APPROVAL_REQUESTED,
        draft.action.get("action_id"),
        approval_id=draft.approval_id,
        data=data,
    )
    append_events_in_txn(txn, [requested])
    record = get_approval_in_txn(txn, draft.approval_id)
    assert record is not None
    _notify_in_txn(txn, draft, record, budget)
    return record


def _budget_in_txn(txn: Txn, draft: ApprovalRequestDraft) -> dict[str, object] | None:
    """The stored form of the budget's state as this transaction reads it (None: the
    action is not budgeted)."""
    charge = draft.budget
    if charge is None:
        return None
    state = peek_in_txn(txn, charge.budget, charge.budget_id, charge.amount)
    return BudgetFacts.of(charge, state).to_dict()


def _notify_in_txn(
    txn: Txn,
    draft: ApprovalRequestDraft,
    record: ApprovalRecord,
    budget: dict[str, object] | None,
) -> None:
    """One outbox message per target told of approvals, in the request's own transaction
    (deduped per request and target). The message names the target, nothing more of it."""
    if not draft.notify:
        return
    event = approval_event(
        approval_id=record.approval_id,
        action=record.action,
        action_hash=record.action_hash,
        policy_hash=record.policy_hash,
        expires_at=record.expires_at,
        summary=draft.summary,
        created_at=record.created_at,
        required=record.required,
        budget=budget,
    )
    enqueue_notices_in_txn(
        txn, notices(draft.notify, NotifyKind.APPROVAL, event, record.approval_id)
    )


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
                "now": txn.ts(txn.now),
            },
        )
        append_events_in_txn(
            txn,
            [EventDraft(EventType.APPROVAL_EXPIRED, None, approval_id=record.approval_id)],
        )
        raise KeptRefusal(plan.refusal)
    raise plan.refusal


def grants_in_txn(txn: Txn, approval_id: str) -> list[Grant]:
    """Every grant of ``approval_id``, in the order given."""
    rows = txn.all("approval_grant_list", {"approval_id": approval_id})
    return [Grant(r["approver"], txn.read_ts(r["granted_at"]), r["signature"]) for r in rows]


def answer_approval_in_txn(
    txn: Txn,
    *,
    approval_id: str,
    approver: str,
    grant: bool,
    reason: str | None = None,
    signature: str | None = None,
) -> ApprovalRecord:
    """A denial: PENDING → DENIED (its ``reason`` on the ``APPROVAL_DENIED`` event). A grant:
    one more ``approval_grants`` row (``plan_grant``: not the requester, not twice by one
    approver); the grant that makes the distinct approvers enough moves it to GRANTED. A
    lost race is ``answered``. The request's row is locked first (``approval_get_locked``),
    so simultaneous grants are counted one after another: each sees every grant before it."""
    row = txn.one("approval_get_locked", {"approval_id": approval_id})
    record = None if row is None else approval_from_row(row, txn.read_ts)
    _apply_refusal(txn, record, plan_answer(record, approval_id=approval_id, now=txn.now))
    assert record is not None
    data: dict[str, object] = {"approver": approver}
    complete = True
    if grant:
        grants = grants_in_txn(txn, approval_id)
        refusal, complete = plan_grant(record, grants, approver=approver)
        if refusal is not None:
            raise refusal
        row = {"approval_id": approval_id, "approver": approver, "signature": signature}
        if txn.run("approval_grant_insert", {**row, "granted_at": txn.ts(txn.now)}) != 1:
            raise _concurrent(approval_id)
        names = [g.approver for g in grants] + [approver]
        if record.required > 1:  # one approver: the event reads as it always has
            data |= {"grants": len(names), "required": record.required}
        approver = ", ".join(names)
    if complete:
        _close(
            txn, approval_id, approver, ApprovalStatus.GRANTED if grant else ApprovalStatus.DENIED
        )
    kind = EventType.APPROVAL_GRANTED if grant else EventType.APPROVAL_DENIED
    data |= {"reason": reason} if reason is not None else {}
    if not grant and signature is not None:  # a grant's signature is on its grant row
        data["signature"] = signature
    append_events_in_txn(txn, [EventDraft(kind, None, approval_id=approval_id, data=data)])
    answered = get_approval_in_txn(txn, approval_id)
    assert answered is not None
    return answered


def _close(txn: Txn, approval_id: str, approver: str, status: ApprovalStatus) -> None:
    params = {
        "approval_id": approval_id,
        "status": str(status),
        "approver": approver,
        "answered_at": txn.ts(txn.now),
    }
    if txn.run("approval_answer", params) != 1:
        raise _concurrent(approval_id)


def _concurrent(approval_id: str) -> ApprovalMismatch:
    return ApprovalMismatch(
        f"approval {approval_id} was answered concurrently",
        reason=MismatchReason.ANSWERED,
        approval_id=approval_id,
    )


def check_consumable_in_txn(
    txn: Txn,
    *,
    approval_id: str,
    action_hash: str,
    policy_hash: str | None = None,
    required: int = 1,
    excluded: tuple[str, ...] = (),
    keys: Mapping[str, str] | None = None,
) -> ApprovalRecord:
    """The GRANTED record that may authorise ``action_hash`` under ``policy_hash`` now, or the
    refusal (an expired approval is written EXPIRED first). When the policy the call runs
    under asks for ``required`` distinct approvers or ``excluded`` ones, the grants are
    checked against it (``plan_quorum``), whatever the row says."""
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
    if required > 1 or excluded or keys:
        grants = grants_in_txn(txn, approval_id)
        signatures: tuple[tuple[str, str], ...] = ()
        if keys:  # only verified grants count
            unsigned, signatures = plan_signed(record, grants, keys)
            if unsigned is not None:
                raise unsigned
            grants = [g for g in grants if (g.approver, g.signature) in signatures]
        refusal = plan_quorum(approval_id, grants, required=required, excluded=excluded)
        if refusal is not None:
            raise refusal
        record = replace(record, signatures=signatures)
    return record


def consume_approval_in_txn(
    txn: Txn, *, approval_id: str, action_id: str, action_hash: str
) -> None:
    """GRANTED → CONSUMED by ``action_id``, for ``action_hash`` only (the statement checks it
    again: on Postgres an agent's role reaches the row only through that check); a lost race
    is ``consumed`` (single use)."""
    changed = txn.run(
        "approval_consume",
        {
            "approval_id": approval_id,
            "action_hash": action_hash,
            "consumed_at": txn.ts(txn.now),
            "consumed_by": action_id,
        },
    )
    if changed != 1:
        raise ApprovalMismatch(
            f"approval {approval_id} was consumed concurrently",
            reason=MismatchReason.CONSUMED,
            approval_id=approval_id,
        )
