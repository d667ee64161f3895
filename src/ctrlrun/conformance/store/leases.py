"""Leases: a lapsed lease becomes AMBIGUOUS when a contender finds it (a kept write), never
free; reads never transition anything."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Final

from ctrlrun.errors import AmbiguousEffect, DuplicateEffect
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventType
from ctrlrun.store.protocol import StateStore

from .framework import Case, CaseContext, check, expect_refusal, finish, start, state_of

LEASE: Final = timedelta(seconds=1)


def expired_lease_ambiguous(ctx: CaseContext) -> str:
    """A contender at the lease's last instant is refused as in progress; one after it lapsed
    is refused as ``AmbiguousEffect`` and the record is persisted AMBIGUOUS (seen through a
    second handle) with ``EFFECT_LEASE_EXPIRED``; the holder's late COMMIT is then refused and
    the key stays blocked."""
    store = ctx.scratch.open(ctx.clock)
    key = ctx.key()
    start(store, key, ctx.action("holder"), lease=LEASE)
    ctx.clock.advance(LEASE)
    expect_refusal(
        "contend at the lease's last instant",
        partial(start, store, key, ctx.action("early")),
        DuplicateEffect,
        state="in_progress",
    )
    ctx.clock.advance(timedelta(minutes=1))
    expect_refusal(
        "contend after the lease lapsed",
        partial(start, store, key, ctx.action("late")),
        AmbiguousEffect,
    )
    other = ctx.scratch.reopen(ctx.clock) or store
    record = other.get_effect(key)
    check(
        record is not None
        and (record.state, record.action_id, record.attempt)
        == (EffectState.AMBIGUOUS, ctx.action("holder"), 1),
        f"the lapsed record was not persisted AMBIGUOUS for the holder: {record}",
    )
    kinds = [e.type for e in other.events(ctx.action("holder"))]
    check(EventType.EFFECT_LEASE_EXPIRED in kinds, f"no EFFECT_LEASE_EXPIRED event: {kinds}")
    expect_refusal(
        "the holder's late COMMIT",
        partial(finish, store, key, ctx.action("holder"), 1, EffectState.COMMITTED),
        AmbiguousEffect,
    )
    expect_refusal(
        "contend again", partial(start, store, key, ctx.action("later")), AmbiguousEffect
    )
    check(state_of(other, key) == EffectState.AMBIGUOUS, "the key did not stay AMBIGUOUS")
    return "live at its last instant; lapsed → AMBIGUOUS, persisted, late commit refused"


def _read_everything(store: StateStore, ctx: CaseContext) -> None:
    store.get_effect(ctx.key())
    store.list_effects()
    for state in EffectState:
        store.list_effects(state)
    store.events()
    store.events(ctx.action("holder"))
    store.receipts()
    store.chain_head()
    store.verify_chain()
    store.list_approvals()


def reads_never_transition(ctx: CaseContext) -> str:
    """Every read (get/list effects by each state, events, receipts, chain head and
    verification, approvals) through two handles leaves a lapsed record EXECUTING with no
    ``EFFECT_LEASE_EXPIRED``; a contender then finds the lapse (the control)."""
    store = ctx.scratch.open(ctx.clock)
    key = ctx.key()
    start(store, key, ctx.action("holder"), lease=LEASE)
    ctx.clock.advance(timedelta(minutes=1))
    handles = [store, ctx.scratch.reopen(ctx.clock) or store]
    for handle in handles:
        before = state_of(handle, key)
        check(before == EffectState.EXECUTING, f"reading the lapsed record returned {before}")
        _read_everything(handle, ctx)
    for handle in handles:
        state = state_of(handle, key)
        check(state == EffectState.EXECUTING, f"reads moved the lapsed record to {state}")
        kinds = [e.type for e in handle.events(ctx.action("holder"))]
        check(EventType.EFFECT_LEASE_EXPIRED not in kinds, "a read appended EFFECT_LEASE_EXPIRED")
    expect_refusal(
        "control: contend after the lapse",
        partial(start, store, key, ctx.action("contender")),
        AmbiguousEffect,
    )
    return "every read left the lapsed record EXECUTING; a contender then found it"


def close_is_not_a_fence(ctx: CaseContext) -> str:
    """``close`` releases the handle's connections but fences nothing: the same handle then
    reads the live record and still refuses a contender for its key."""
    store = ctx.scratch.open()
    start(store, ctx.key(), ctx.action())
    store.close()
    record = store.get_effect(ctx.key())
    check(
        record is not None and record.state is EffectState.EXECUTING,
        f"after close the record reads as {record}",
    )
    expect_refusal(
        "contend after close",
        partial(start, store, ctx.key(), ctx.action("after-close")),
        DuplicateEffect,
        state="in_progress",
    )
    return "closed handle reconnects; the live key still refuses"


CASES: Final = (
    Case.of("leases", "expired-lease-ambiguous", expired_lease_ambiguous),
    Case.of("leases", "reads-never-transition", reads_never_transition),
    Case.of("leases", "close-is-not-a-fence", close_is_not_a_fence),
)
