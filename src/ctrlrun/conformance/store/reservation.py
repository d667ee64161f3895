"""Reservation: one effect key, one winner — in one process, across processes, and for every
row of the retry table."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Final

from ctrlrun.errors import (
    ActionDenied,
    AmbiguousEffect,
    DenyReason,
    DuplicateEffect,
    InvalidArgument,
)
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.store.protocol import Started, StartRequest, StateStore

from .contention import race_processes, race_threads
from .framework import (
    Case,
    CaseContext,
    CaseFailed,
    check,
    expect_refusal,
    finish,
    require_url,
    settle,
    start,
)

ROUNDS: Final = 12
"""A check-then-act store loses a round roughly 40 % of the time; 12 rounds put a miss below
one in ten thousand."""

COMMITTED, IN_PROGRESS = "committed", "in_progress"


def one_winner_in_process(ctx: CaseContext) -> str:
    """N threads on one handle reserve one key at once, ROUNDS times: one winner per round,
    every loser refused as ``DuplicateEffect(in_progress)``, the record naming the winner."""
    store = ctx.scratch.open()
    n = ctx.processes
    for round_no in range(1, ROUNDS + 1):
        key = ctx.key(f"round-{round_no}")
        ids = [ctx.action(f"r{round_no}-{i}") for i in range(n)]
        results = race_threads([partial(start, store, key, a) for a in ids])
        winners = [a for a, r in zip(ids, results, strict=True) if isinstance(r, Started)]
        check(
            len(winners) == 1,
            f"round {round_no}: {len(winners)} of {n} contenders won the reservation of one key",
        )
        for result in results:
            if not isinstance(result, Started):
                _loser(result, f"round {round_no}: a loser")
        record = store.get_effect(key)
        check(
            record is not None
            and (record.action_id, record.attempt, record.state)
            == (winners[0], 1, EffectState.EXECUTING),
            f"round {round_no}: the record does not name the winner {winners[0]}: {record}",
        )
        finish(store, key, winners[0], 1, EffectState.COMMITTED)
    return f"{ROUNDS} rounds of {n} threads: one winner each, {n - 1} refused as in_progress"


def _loser(result: object, what: str) -> None:
    if not isinstance(result, DuplicateEffect) or result.state != IN_PROGRESS:
        got = f"{type(result).__name__}({result})"
        raise CaseFailed(f"{what} got {got}, expected DuplicateEffect(state=in_progress)")


def one_winner_cross_process(ctx: CaseContext) -> str:
    """N OS processes behind a file barrier reserve one key, call a fake remote and record
    COMMITTED: all N arrived, exactly one won, the remote ran once, every loser was refused
    as a duplicate, and the record is COMMITTED naming the winner."""
    url = require_url(ctx)
    store = ctx.scratch.open()  # migrated once, so the race is on the key alone
    key, n = ctx.key(), ctx.processes
    payloads = [{"task": "reserve", "key": key, "action_id": ctx.action(i)} for i in range(n)]
    race = race_processes(url, payloads)
    winners = race.with_outcome("won")
    check(len(winners) == 1, f"{len(winners)} of {n} processes won the reservation of one key")
    calls = [name for name in race.remote_calls if name.startswith("call-")]
    check(len(calls) == 1, f"the remote was called {len(calls)} times")
    check(not winners[0].get("error"), f"the winner failed to record: {winners[0].get('error')}")
    for loser in race.outputs:
        if loser is not winners[0]:
            outcome = str(loser.get("outcome"))
            check(
                outcome
                in (
                    f"refused:DuplicateEffect:{IN_PROGRESS}",
                    f"refused:DuplicateEffect:{COMMITTED}",
                ),
                f"a losing process got {outcome}, expected DuplicateEffect",
            )
    record = store.get_effect(key)
    check(
        record is not None
        and record.state is EffectState.COMMITTED
        and record.action_id == winners[0]["action_id"],
        f"the record is {record}, expected COMMITTED by {winners[0]['action_id']}",
    )
    kinds = {str(o.get("store_class")) for o in race.outputs}
    return f"{n} processes arrived; 1 won, remote called once (children's store: {sorted(kinds)})"


def retry_table(ctx: CaseContext) -> str:
    """Every row of the planner's table, by refusal class and field: committed → duplicate
    (committed); live executing or reserved → duplicate (in_progress), even for the holder's
    own action id; ambiguous → ambiguous; failed → a renewal at attempt + 1 naming the new
    action; failed past ``max_attempts`` → denied (attempt_ceiling), nothing written."""
    store = ctx.scratch.open()
    settle(store, ctx.key("committed"), ctx.action("c"), EffectState.COMMITTED)
    expect_refusal(
        "reserve a committed key",
        lambda: start(store, ctx.key("committed"), ctx.action("c2")),
        DuplicateEffect,
        state=COMMITTED,
    )
    start(store, ctx.key("executing"), ctx.action("e"))
    start(store, ctx.key("reserved"), ctx.action("r"), execute=False)
    for key, holder in (("executing", "e"), ("reserved", "r")):
        for contender in (f"{holder}2", holder):
            expect_refusal(
                f"reserve a live {key} key as {ctx.action(contender)}",
                partial(start, store, ctx.key(key), ctx.action(contender)),
                DuplicateEffect,
                state=IN_PROGRESS,
            )
    settle(store, ctx.key("ambiguous"), ctx.action("a"), EffectState.AMBIGUOUS)
    expect_refusal(
        "reserve an ambiguous key",
        lambda: start(store, ctx.key("ambiguous"), ctx.action("a2")),
        AmbiguousEffect,
    )
    _renewal_rows(ctx, store)
    return "committed, executing, reserved, ambiguous, failed and ceiling rows as specified"


def _renewal_rows(ctx: CaseContext, store: StateStore) -> None:
    settle(store, ctx.key("failed"), ctx.action("f"), EffectState.FAILED)
    renewal = start(store, ctx.key("failed"), ctx.action("f2"))
    record = store.get_effect(ctx.key("failed"))
    check(
        renewal.reservation is not None
        and renewal.reservation.attempt == 2
        and record is not None
        and (record.action_id, record.attempt) == (ctx.action("f2"), 2),
        f"a renewal of a failed key is not attempt 2 by the new action: {renewal}, {record}",
    )
    settle(store, ctx.key("ceiling"), ctx.action("m"), EffectState.FAILED)
    expect_refusal(
        "renew a failed key past max_attempts=1",
        lambda: start(store, ctx.key("ceiling"), ctx.action("m2"), max_attempts=1),
        ActionDenied,
        reason=DenyReason.ATTEMPT_CEILING,
    )
    record = store.get_effect(ctx.key("ceiling"))
    check(
        record is not None and (record.state, record.attempt) == (EffectState.FAILED, 1),
        f"a refused renewal changed the record: {record}",
    )


def two_phase_start(ctx: CaseContext) -> str:
    """A reservation is attempt 1 leased until the store's clock plus the lease; one made
    without executing is RESERVED until ``begin_execution`` moves it to EXECUTING, once (a
    second move is refused, ``InvalidArgument``); a refused reservation appends none of the
    caller's events."""
    store = ctx.scratch.open(ctx.clock)
    lease = timedelta(minutes=3)
    granted = start(store, ctx.key(), ctx.action(), lease=lease, execute=False)
    record = store.get_effect(ctx.key())
    expected = (EffectState.RESERVED, 1, ctx.clock() + lease)
    check(
        granted.reservation is not None
        and record is not None
        and (record.state, record.attempt, record.lease_expires_at) == expected,
        f"a reservation without executing is {record}, expected RESERVED attempt 1 leased"
        f" until {expected[2]}",
    )
    moved = store.begin_execution(ctx.key(), ctx.action(), 1)
    check(moved.state is EffectState.EXECUTING, f"begin_execution left {moved.state}")
    again = partial(store.begin_execution, ctx.key(), ctx.action(), 1)
    expect_refusal("begin the same attempt twice", again, InvalidArgument)
    before = len(store.events())
    mine = (EventDraft(EventType.ACTION_PROPOSED, ctx.action("late")),)
    expect_refusal(
        "reserve a live key with the caller's events",
        lambda: store.start_action(_request(ctx, mine)),
        DuplicateEffect,
        state=IN_PROGRESS,
    )
    check(len(store.events()) == before, "a refused reservation appended events")
    return "RESERVED → EXECUTING once; lease from the store's clock; refusal wrote no events"


def _request(ctx: CaseContext, events: tuple[EventDraft, ...]) -> StartRequest:
    return StartRequest(
        action_id=ctx.action("late"),
        effect_key=ctx.key(),
        lease=timedelta(minutes=5),
        events=events,
    )


CASES: Final = (
    Case.of("reservation", "one-winner-in-process", one_winner_in_process),
    Case.of("reservation", "one-winner-cross-process", one_winner_cross_process),
    Case.of("reservation", "retry-table", retry_table),
    Case.of("reservation", "two-phase-start", two_phase_start),
)
