"""Approvals: bound to one action hash, single use, expiring, consumed atomically with the
reservation, answered once, and refused before a duplicate is."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Final

from ctrlrun.errors import ApprovalMismatch, DuplicateEffect, MismatchReason, NotExecuted
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalRequestDraft, ApprovalStatus
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventType
from ctrlrun.store.protocol import StateStore

from .contention import race_processes
from .framework import (
    APPROVER,
    HASH_A,
    HASH_B,
    Case,
    CaseContext,
    CaseFailed,
    check,
    expect_refusal,
    finish,
    granted_approval,
    require_url,
    settle,
    start,
    state_of,
)


def _approval(store: StateStore, approval_id: str) -> ApprovalRecord:
    record = store.get_approval(approval_id)
    if record is None:
        raise CaseFailed(f"approval {approval_id} vanished")
    return record


def _still_granted(store: StateStore, approval_id: str, after: str) -> None:
    record = _approval(store, approval_id)
    check(
        record.status is ApprovalStatus.GRANTED and record.consumed_by is None,
        f"after {after} the approval is {record.status} (consumed by {record.consumed_by}),"
        " expected still granted",
    )


def binding(ctx: CaseContext) -> str:
    """An approval granted for hash A refuses hash B (``mismatch``), stays granted, reserves
    nothing; the same approval then authorises hash A."""
    store = ctx.scratch.open()
    approval = granted_approval(store, ctx.action("apr"), HASH_A).approval_id
    expect_refusal(
        "consume an approval for hash A with hash B",
        partial(start, store, ctx.key(), ctx.action(), approval_id=approval, action_hash=HASH_B),
        ApprovalMismatch,
        reason=MismatchReason.MISMATCH,
    )
    _still_granted(store, approval, "a refused mismatch")
    check(state_of(store, ctx.key()) == "absent", "a refused consumption reserved the key")
    start(store, ctx.key(), ctx.action("ok"), approval_id=approval, action_hash=HASH_A)
    record = _approval(store, approval)
    check(
        (record.status, record.consumed_by) == (ApprovalStatus.CONSUMED, ctx.action("ok")),
        f"the matching hash did not consume the approval: {record.status}",
    )
    return "hash B refused as mismatch, approval left granted; hash A consumed it"


def single_use(ctx: CaseContext) -> str:
    """The second consumption of one approval is refused (``consumed``) and reserves nothing."""
    store = ctx.scratch.open()
    approval = granted_approval(store, ctx.action("apr")).approval_id
    start(store, ctx.key(1), ctx.action(1), approval_id=approval, action_hash=HASH_A)
    expect_refusal(
        "consume the approval a second time",
        partial(start, store, ctx.key(2), ctx.action(2), approval_id=approval, action_hash=HASH_A),
        ApprovalMismatch,
        reason=MismatchReason.CONSUMED,
    )
    check(state_of(store, ctx.key(2)) == "absent", "the refused replay reserved its key")
    record = _approval(store, approval)
    check(
        (record.status, record.consumed_by) == (ApprovalStatus.CONSUMED, ctx.action(1)),
        f"the approval is {record.status} by {record.consumed_by}, expected consumed by the first",
    )
    return "second consumption refused as consumed; consumed_by names the first"


def expiry(ctx: CaseContext) -> str:
    """Expiry is checked at consumption: at ``expires_at`` exactly an approval still works;
    one microsecond later another is refused (``expired``) and recorded EXPIRED (a kept write),
    with an ``APPROVAL_EXPIRED`` event."""
    store = ctx.scratch.open(ctx.clock)
    ttl = timedelta(minutes=10)
    on_time = granted_approval(store, ctx.action("apr-1"), ttl=ttl).approval_id
    late = granted_approval(store, ctx.action("apr-2"), ttl=ttl).approval_id
    ctx.clock.advance(ttl)
    start(store, ctx.key(1), ctx.action(1), approval_id=on_time, action_hash=HASH_A)
    ctx.clock.advance(timedelta(microseconds=1))
    expect_refusal(
        "consume an approval one microsecond after it expired",
        partial(start, store, ctx.key(2), ctx.action(2), approval_id=late, action_hash=HASH_A),
        ApprovalMismatch,
        reason=MismatchReason.EXPIRED,
    )
    check(state_of(store, ctx.key(2)) == "absent", "the expired approval reserved its key")
    status = _approval(store, late).status
    check(status is ApprovalStatus.EXPIRED, f"the lapsed approval is {status}, not expired")
    events = [e.type for e in store.events() if e.approval_id == late]
    check(EventType.APPROVAL_EXPIRED in events, f"no APPROVAL_EXPIRED event: {events}")
    return "usable at expires_at, refused 1 µs later and recorded EXPIRED"


def consume_and_reserve_atomic(ctx: CaseContext) -> str:
    """A reservation refused as a duplicate leaves the presented approval GRANTED (consumption
    and reservation are one transaction); the approval then serves a free key."""
    store = ctx.scratch.open()
    settle(store, ctx.key(1), ctx.action("first"), EffectState.COMMITTED)
    approval = granted_approval(store, ctx.action("apr")).approval_id
    expect_refusal(
        "consume and reserve on a committed key",
        partial(start, store, ctx.key(1), ctx.action(1), approval_id=approval, action_hash=HASH_A),
        DuplicateEffect,
        state="committed",
    )
    _still_granted(store, approval, "a refused reservation")
    start(store, ctx.key(2), ctx.action(2), approval_id=approval, action_hash=HASH_A)
    check(_approval(store, approval).status is ApprovalStatus.CONSUMED, "control: not consumed")
    return "refused reservation left the approval granted; a free key then consumed it"


def approval_checked_first(ctx: CaseContext) -> str:
    """When a replayed approval meets a committed key, the approval's refusal is the one
    raised (``ApprovalMismatch(consumed)``, not ``DuplicateEffect``)."""
    store = ctx.scratch.open()
    approval = granted_approval(store, ctx.action("apr")).approval_id
    started = start(store, ctx.key(), ctx.action(1), approval_id=approval, action_hash=HASH_A)
    assert started.reservation is not None
    finish(store, ctx.key(), ctx.action(1), started.reservation.attempt, EffectState.COMMITTED)
    expect_refusal(
        "replay a consumed approval on its committed key",
        partial(start, store, ctx.key(), ctx.action(2), approval_id=approval, action_hash=HASH_A),
        ApprovalMismatch,
        reason=MismatchReason.CONSUMED,
    )
    return "ApprovalMismatch(consumed) raised before DuplicateEffect"


def answered_once(ctx: CaseContext) -> str:
    """A granted request cannot then be denied (``answered``); it stays granted."""
    store = ctx.scratch.open()
    approval = granted_approval(store, ctx.action("apr")).approval_id
    expect_refusal(
        "deny a granted approval",
        partial(store.deny_approval, approval, "someone-else"),
        ApprovalMismatch,
        reason=MismatchReason.ANSWERED,
    )
    record = _approval(store, approval)
    check(
        (record.status, record.approver) == (ApprovalStatus.GRANTED, APPROVER),
        f"the approval is {record.status} by {record.approver} after a refused second answer",
    )
    return "second answer refused as answered; first answer kept"


def insert_not_upsert(ctx: CaseContext) -> str:
    """Recording a request under an existing id fails and changes nothing: an insert must
    never overwrite an answer (an upsert would reset a granted approval)."""
    store = ctx.scratch.open()
    approval = granted_approval(store, ctx.action("apr"), HASH_A).approval_id
    draft = ApprovalRequestDraft(
        approval, {"action_id": ctx.action("again")}, HASH_B, "sha256:" + "11" * 32
    )
    try:
        store.put_approval_request(draft)
    except NotExecuted as exc:
        raise CaseFailed("a duplicate request raised NotExecuted") from exc
    except Exception:  # noqa: S110 - any refusal will do; what matters is what is left
        pass
    else:
        raise CaseFailed("a second request with an existing id was accepted")
    record = _approval(store, approval)
    check(
        (record.status, record.approver, record.action_hash)
        == (ApprovalStatus.GRANTED, APPROVER, HASH_A),
        f"a refused duplicate request changed the approval: {record.status},"
        f" {record.approver}, {record.action_hash}",
    )
    return "duplicate id refused; the granted approval is unchanged"


def consume_cross_process(ctx: CaseContext) -> str:
    """N OS processes present one approval, each for its own key: exactly one consumes it;
    the others are refused as ``consumed`` and reserve nothing."""
    url = require_url(ctx)
    store = ctx.scratch.open()
    approval = granted_approval(store, ctx.action("apr")).approval_id
    n = ctx.processes
    payloads = [
        {
            "task": "consume",
            "key": ctx.key(i),
            "action_id": ctx.action(i),
            "approval_id": approval,
            "action_hash": HASH_A,
        }
        for i in range(n)
    ]
    race = race_processes(url, payloads)
    winners = race.with_outcome("won")
    check(len(winners) == 1, f"{len(winners)} of {n} processes consumed one approval")
    for loser in race.outputs:
        outcome = str(loser.get("outcome"))
        check(
            loser is winners[0] or outcome == "refused:ApprovalMismatch:consumed",
            f"a losing process got {outcome}, expected ApprovalMismatch(consumed)",
        )
    record = _approval(store, approval)
    check(
        record.consumed_by == winners[0]["action_id"],
        f"consumed_by is {record.consumed_by}, the winner was {winners[0]['action_id']}",
    )
    reserved = [i for i in range(n) if state_of(store, ctx.key(i)) != "absent"]
    check(len(reserved) == 1, f"{len(reserved)} keys were reserved with one approval")
    return f"{n} processes arrived; exactly one consumed the approval"


CASES: Final = (
    Case.of("approvals", "binding", binding),
    Case.of("approvals", "single-use", single_use),
    Case.of("approvals", "expiry", expiry),
    Case.of("approvals", "consume-and-reserve-atomic", consume_and_reserve_atomic),
    Case.of("approvals", "approval-checked-first", approval_checked_first),
    Case.of("approvals", "answered-once", answered_once),
    Case.of("approvals", "insert-not-upsert", insert_not_upsert),
    Case.of("approvals", "consume-cross-process", consume_cross_process),
)
