"""Durability: a second, independent handle (a restart, another host) sees everything the
first wrote: AMBIGUOUS still refusing, terminal states with their results, the resolver."""

from __future__ import annotations

from functools import partial
from typing import Final

from ctrlrun.errors import AmbiguousEffect, DuplicateEffect
from ctrlrun.kernel.effect import EffectRecord, EffectState
from ctrlrun.store.protocol import StateStore

from .framework import (
    Case,
    CaseContext,
    CaseFailed,
    check,
    expect_refusal,
    require_reopen,
    settle,
    start,
)


def _reopened(ctx: CaseContext, first: StateStore) -> StateStore:
    first.close()
    return require_reopen(ctx, first)


def _same(record: EffectRecord | None, seen: EffectRecord | None, what: str) -> EffectRecord:
    if seen is None:
        raise CaseFailed(f"after reopening, the {what} record is absent")
    fields = ("state", "action_id", "attempt", "result", "error", "resolved_by")
    differ = [f for f in fields if getattr(record, f) != getattr(seen, f)]
    check(not differ, f"after reopening, the {what} record differs in {differ}")
    return seen


def ambiguous_survives(ctx: CaseContext) -> str:
    """An AMBIGUOUS record read through a new handle is still AMBIGUOUS and still refuses."""
    first = ctx.scratch.open()
    settle(first, ctx.key(), ctx.action(), EffectState.AMBIGUOUS)
    written = first.get_effect(ctx.key())
    second = _reopened(ctx, first)
    _same(written, second.get_effect(ctx.key()), "ambiguous")
    expect_refusal(
        "reserve the ambiguous key through the new handle",
        partial(start, second, ctx.key(), ctx.action("retry")),
        AmbiguousEffect,
    )
    return "AMBIGUOUS read back and still refusing after reopen"


def terminal_states_survive(ctx: CaseContext) -> str:
    """COMMITTED (with its result) and FAILED (with its error) read back identically through
    a new handle; the committed key still refuses, the receipts and chain head are the same."""
    first = ctx.scratch.open()
    written = {}
    for state in (EffectState.COMMITTED, EffectState.FAILED):
        settle(first, ctx.key(state), ctx.action(state), state)
        written[state] = first.get_effect(ctx.key(state))
    receipts, head = first.receipts(), first.chain_head()
    second = _reopened(ctx, first)
    for state, record in written.items():
        _same(record, second.get_effect(ctx.key(state)), str(state))
    expect_refusal(
        "reserve the committed key through the new handle",
        partial(start, second, ctx.key(EffectState.COMMITTED), ctx.action("again")),
        DuplicateEffect,
        state="committed",
    )
    check(second.receipts() == receipts, "after reopening, the receipts differ")
    check(second.chain_head() == head, "after reopening, the chain head differs")
    return "committed and failed records, receipts and head identical after reopen"


def resolver_survives(ctx: CaseContext) -> str:
    """A resolution and its resolver read back through a new handle."""
    first = ctx.scratch.open()
    settle(first, ctx.key(), ctx.action(), EffectState.AMBIGUOUS)
    resolved = first.resolve_effect(ctx.key(), EffectState.COMMITTED, "conformance-resolver")
    second = _reopened(ctx, first)
    seen = _same(resolved, second.get_effect(ctx.key()), "resolved")
    check(seen.resolved_by == "conformance-resolver", f"resolver read back as {seen.resolved_by}")
    return "resolved state and resolver identical after reopen"


CASES: Final = (
    Case.of("durability", "ambiguous-survives", ambiguous_survives),
    Case.of("durability", "terminal-states-survive", terminal_states_survive),
    Case.of("durability", "resolver-survives", resolver_survives),
)
