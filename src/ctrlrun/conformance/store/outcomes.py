"""Outcomes: COMMITTED, FAILED and AMBIGUOUS are recorded as given; no refusal path writes
FAILED; no store method raises ``NotExecuted``; a finish the store cannot complete changes
nothing (a store exception is never read as "failed")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Final

from ctrlrun.errors import AmbiguousEffect, DuplicateEffect, InvalidArgument, NotExecuted, Refused
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.store.protocol import FinishRequest, StateStore

from .framework import (
    HASH_A,
    HASH_B,
    Case,
    CaseContext,
    CaseFailed,
    check,
    expect_refusal,
    finish,
    granted_approval,
    receipt_for,
    settle,
    start,
    state_of,
)

_OUTCOME_EVENT: Final = {
    EffectState.COMMITTED: EventType.EXECUTION_COMMITTED,
    EffectState.FAILED: EventType.EXECUTION_FAILED,
}


def transitions(ctx: CaseContext) -> str:
    """A live attempt's outcome is stored as given: COMMITTED (then refused as a duplicate),
    FAILED (then renewable), AMBIGUOUS (then refused as ambiguous) — never another state."""
    store = ctx.scratch.open()
    for outcome in (EffectState.COMMITTED, EffectState.FAILED, EffectState.AMBIGUOUS):
        key = ctx.key(outcome)
        settle(store, key, ctx.action(outcome), outcome)
        record = store.get_effect(key)
        check(
            record is not None and record.state is outcome,
            f"an {outcome.upper()} outcome was stored as {record.state if record else 'nothing'}",
        )
    expect_refusal(
        "reserve after COMMITTED",
        partial(start, store, ctx.key(EffectState.COMMITTED), ctx.action("again-c")),
        DuplicateEffect,
        state="committed",
    )
    renewal = start(store, ctx.key(EffectState.FAILED), ctx.action("again-f"))
    check(
        renewal.reservation is not None and renewal.reservation.attempt == 2,
        "FAILED was not renewable as attempt 2",
    )
    expect_refusal(
        "reserve after AMBIGUOUS",
        partial(start, store, ctx.key(EffectState.AMBIGUOUS), ctx.action("again-a")),
        AmbiguousEffect,
    )
    return "committed, failed, ambiguous stored as given and refused/renewed accordingly"


@dataclass(frozen=True, slots=True)
class _Stage:
    """Records in every state, and an approval already spent, for the refusal calls."""

    store: StateStore
    ctx: CaseContext
    spent: str

    def watched(self) -> dict[str, tuple[str, str | None, int | None]]:
        out: dict[str, tuple[str, str | None, int | None]] = {}
        for name in ("committed", "failed", "ambiguous", "executing", "fresh-1", "fresh-2"):
            record = self.store.get_effect(self.ctx.key(name))
            out[name] = (
                (str(record.state), record.action_id, record.attempt)
                if record
                else ("absent", None, None)
            )
        return out


def _stage(ctx: CaseContext) -> _Stage:
    store = ctx.scratch.open()
    for state in (EffectState.COMMITTED, EffectState.FAILED, EffectState.AMBIGUOUS):
        settle(store, ctx.key(state), ctx.action(state), state)
    start(store, ctx.key("executing"), ctx.action("holder"))
    spent = granted_approval(store, ctx.action("apr")).approval_id
    start(store, ctx.key("spender"), ctx.action("spender"), approval_id=spent, action_hash=HASH_A)
    return _Stage(store, ctx, spent)


def _refusal_calls(stage: _Stage) -> list[tuple[str, Callable[[], object]]]:
    """Thirteen calls a correct store refuses, each labelled for the failure reason."""
    s, c = stage.store, stage.ctx
    k, a = c.key, c.action
    return [
        ("reserve a committed key", partial(start, s, k("committed"), a("x1"))),
        ("reserve an ambiguous key", partial(start, s, k("ambiguous"), a("x2"))),
        ("reserve an executing key", partial(start, s, k("executing"), a("x3"))),
        ("reserve an executing key as its holder", partial(start, s, k("executing"), a("holder"))),
        (
            "finish another's attempt as COMMITTED",
            partial(finish, s, k("executing"), a("x4"), 1, EffectState.COMMITTED),
        ),
        (
            "finish the holder's wrong attempt as FAILED",
            partial(finish, s, k("executing"), a("holder"), 7, EffectState.FAILED),
        ),
        (
            "finish a committed key as FAILED",
            partial(finish, s, k("committed"), a(EffectState.COMMITTED), 1, EffectState.FAILED),
        ),
        (
            "begin an attempt that is already executing",
            partial(s.begin_execution, k("executing"), a("holder"), 1),
        ),
        (
            "resolve a committed key",
            partial(s.resolve_effect, k("committed"), EffectState.FAILED, "conformance"),
        ),
        (
            "resolve an unknown key",
            partial(s.resolve_effect, k("fresh-1"), EffectState.FAILED, "conformance"),
        ),
        (
            "finish an unknown key as FAILED",
            partial(finish, s, k("fresh-1"), a("x5"), 1, EffectState.FAILED),
        ),
        (
            "replay a consumed approval on a fresh key",
            partial(start, s, k("fresh-2"), a("x6"), approval_id=stage.spent, action_hash=HASH_A),
        ),
        (
            "present an approval for another hash",
            partial(start, s, k("fresh-2"), a("x7"), approval_id=stage.spent, action_hash=HASH_B),
        ),
    ]


def no_failed_on_refusal(ctx: CaseContext) -> str:
    """After each of thirteen refused calls (reserving each state, finishing another's or a
    wrong attempt, resolving what is not ambiguous, unknown keys, spent approvals) no watched
    record changed: none became FAILED, none vanished, no fresh key appeared."""
    stage = _stage(ctx)
    before = stage.watched()
    calls = _refusal_calls(stage)
    for label, call in calls:
        try:
            call()
        except Exception:  # noqa: S110 - the refusal's type is no-not-executed's business
            pass
        else:
            raise CaseFailed(f"{label}: admitted")
        after = stage.watched()
        for name, was in before.items():
            now = after[name]
            if now != was:
                became = "failed" if now[0] == EffectState.FAILED else now[0]
                raise CaseFailed(f"{label}: the {name} record became {became} ({was} → {now})")
    return f"{len(calls)} refusals, no watched record changed"


def no_not_executed(ctx: CaseContext) -> str:
    """No store method raises ``NotExecuted`` — the executor's signal that the remote did
    nothing — for any of the thirteen refused calls; each raises a ctrlrun refusal or an
    invalid-argument error instead."""
    stage = _stage(ctx)
    calls = _refusal_calls(stage)
    for label, call in calls:
        try:
            call()
        except NotExecuted as exc:
            raise CaseFailed(f"{label}: raised NotExecuted") from exc
        except (Refused, InvalidArgument):
            continue
        except Exception as exc:
            raise CaseFailed(
                f"{label}: raised {type(exc).__name__} ({exc}), not a refusal"
            ) from exc
        raise CaseFailed(f"{label}: admitted")
    return f"{len(calls)} refusals, each a Refused or InvalidArgument"


def store_error_not_failed(ctx: CaseContext) -> str:
    """A finish the store cannot complete (its receipt cannot be chained: it holds a float)
    raises, and leaves the record exactly as it was — never FAILED, no receipt — because the
    outcome, its events and its receipt are one transaction. The same finish with a valid
    receipt then records the outcome."""
    store = ctx.scratch.open()
    for outcome in (EffectState.FAILED, EffectState.COMMITTED):
        key, action = ctx.key(outcome), ctx.action(outcome)
        start(store, key, action)
        bad = FinishRequest(
            action_id=action,
            receipt=receipt_for(action, str(outcome), key, amount=1.5),
            effect_key=key,
            attempt=1,
            outcome=outcome,
            error="conformance",
            events=(EventDraft(_OUTCOME_EVENT[outcome], action, key),),
        )
        try:
            store.finish_action(bad)
        except NotExecuted as exc:
            raise CaseFailed("a failed finish raised NotExecuted") from exc
        except Exception:  # noqa: S110 - it must raise; what it left behind is checked next
            pass
        else:
            raise CaseFailed("a receipt that cannot be chained was accepted")
        state = state_of(store, key)
        check(
            state == EffectState.EXECUTING,
            f"a {outcome.upper()} finish that raised left the record {state}",
        )
        check(not store.receipts(action), "a finish that raised left a receipt")
        kinds = [e.type for e in store.events(action)]
        check(_OUTCOME_EVENT[outcome] not in kinds, "a finish that raised left its event")
        finish(store, key, action, 1, outcome)
        check(state_of(store, key) == outcome, f"control: a valid {outcome} finish was not kept")
    return "failed finishes changed nothing; valid ones were recorded"


def ambiguous_settles(ctx: CaseContext) -> str:
    """AMBIGUOUS is recorded over a RESERVED record (interrupted before executing) and over
    a record already made AMBIGUOUS by a contender (idempotent, still refusing); a renewal of
    a FAILED key clears the old error; a result that is not JSON is kept as its repr, never
    lost and never failing the outcome."""
    store = ctx.scratch.open(ctx.clock)
    start(store, ctx.key("reserved"), ctx.action("reserved"), execute=False)
    finish(store, ctx.key("reserved"), ctx.action("reserved"), 1, EffectState.AMBIGUOUS)
    check(state_of(store, ctx.key("reserved")) == "ambiguous", "RESERVED did not settle")
    lapsed = ctx.key("lapsed")
    start(store, lapsed, ctx.action("holder"), lease=timedelta(seconds=1))
    ctx.clock.advance(timedelta(minutes=1))
    contend = partial(start, store, lapsed, ctx.action("contender"))
    expect_refusal("contend after the lease lapsed", contend, AmbiguousEffect)
    finish(store, lapsed, ctx.action("holder"), 1, EffectState.AMBIGUOUS)
    check(state_of(store, lapsed) == "ambiguous", "an AMBIGUOUS record did not stay so")
    expect_refusal("contend again", contend, AmbiguousEffect)
    settle(store, ctx.key("failed"), ctx.action("failed"), EffectState.FAILED)
    start(store, ctx.key("failed"), ctx.action("renewal"))
    renewed = store.get_effect(ctx.key("failed"))
    check(renewed is not None and renewed.error is None, "a renewal kept the old error")
    start(store, ctx.key("repr"), ctx.action("repr"))
    store.finish_action(_finish_with(ctx, ctx.key("repr"), ctx.action("repr"), object()))
    kept = store.get_effect(ctx.key("repr"))
    check(
        kept is not None and kept.state is EffectState.COMMITTED and "repr" in (kept.result or {}),
        f"a result that is not JSON was not kept as its repr: {kept}",
    )
    return "AMBIGUOUS over RESERVED and over AMBIGUOUS; renewal clears the error; repr kept"


def _finish_with(ctx: CaseContext, key: str, action: str, result: object) -> FinishRequest:
    return FinishRequest(
        action_id=action,
        receipt=receipt_for(action, "committed", key),
        effect_key=key,
        attempt=1,
        outcome=EffectState.COMMITTED,
        result=result,
    )


CASES: Final = (
    Case.of("outcomes", "transitions", transitions),
    Case.of("outcomes", "no-failed-on-refusal", no_failed_on_refusal),
    Case.of("outcomes", "no-not-executed", no_not_executed),
    Case.of("outcomes", "store-error-not-failed", store_error_not_failed),
    Case.of("outcomes", "ambiguous-settles", ambiguous_settles),
)
