"""Resolution: only an AMBIGUOUS record is resolved, only to COMMITTED or FAILED, and who
resolved it is recorded (and cleared when a renewal starts a new attempt)."""

from __future__ import annotations

from functools import partial
from typing import Final

from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventType

from .framework import Case, CaseContext, check, expect_refusal, settle, start, state_of

RESOLVER = "conformance-resolver"


def only_ambiguous(ctx: CaseContext) -> str:
    """Resolving a COMMITTED, FAILED or EXECUTING record, or an unknown key, is refused
    (``InvalidArgument``) and changes nothing; an AMBIGUOUS record resolves."""
    store = ctx.scratch.open()
    for state in (EffectState.COMMITTED, EffectState.FAILED, EffectState.AMBIGUOUS):
        settle(store, ctx.key(state), ctx.action(state), state)
    start(store, ctx.key("executing"), ctx.action("executing"))
    for name, target in (
        ("committed", EffectState.FAILED),
        ("failed", EffectState.COMMITTED),
        ("executing", EffectState.FAILED),
        ("missing", EffectState.COMMITTED),
    ):
        before = state_of(store, ctx.key(name))
        expect_refusal(
            f"resolve a {name} record to {target}",
            partial(store.resolve_effect, ctx.key(name), target, RESOLVER),
            InvalidArgument,
        )
        after = state_of(store, ctx.key(name))
        check(after == before, f"a refused resolution moved the {name} record to {after}")
    resolved = store.resolve_effect(ctx.key("ambiguous"), EffectState.FAILED, RESOLVER)
    check(resolved.state is EffectState.FAILED, f"control: ambiguous resolved to {resolved.state}")
    return "4 non-ambiguous resolutions refused; the ambiguous one resolved"


def only_to_terminal(ctx: CaseContext) -> str:
    """An AMBIGUOUS record resolves only to COMMITTED or FAILED (other targets refused,
    record unchanged); both legal targets are stored and read back, and FAILED is renewable."""
    store = ctx.scratch.open()
    for name in ("one", "two"):
        settle(store, ctx.key(name), ctx.action(name), EffectState.AMBIGUOUS)
    for target in (EffectState.AMBIGUOUS, EffectState.EXECUTING, EffectState.RESERVED):
        expect_refusal(
            f"resolve an ambiguous record to {target}",
            partial(store.resolve_effect, ctx.key("one"), target, RESOLVER),
            InvalidArgument,
        )
        check(
            state_of(store, ctx.key("one")) == EffectState.AMBIGUOUS,
            f"a refused resolution to {target} moved the record",
        )
    store.resolve_effect(ctx.key("one"), EffectState.COMMITTED, RESOLVER)
    store.resolve_effect(ctx.key("two"), EffectState.FAILED, RESOLVER)
    read = (state_of(store, ctx.key("one")), state_of(store, ctx.key("two")))
    check(read == ("committed", "failed"), f"resolutions read back as {read}")
    renewal = start(store, ctx.key("two"), ctx.action("two-again"))
    check(
        renewal.reservation is not None and renewal.reservation.attempt == 2,
        "a key resolved FAILED was not renewable as attempt 2",
    )
    return "3 illegal targets refused; committed and failed stored; failed renewable"


def only_that_attempt(ctx: CaseContext) -> str:
    """A verdict bound to an attempt (``attempt=n``) settles only that attempt: once attempt 1
    was resolved and attempt 2 left AMBIGUOUS, a verdict for attempt 1 is refused
    (``InvalidArgument``) and changes nothing; one for attempt 2 resolves it."""
    store = ctx.scratch.open()
    key = ctx.key()
    settle(store, key, ctx.action("first"), EffectState.AMBIGUOUS)
    store.resolve_effect(key, EffectState.FAILED, RESOLVER, attempt=1)
    settle(store, key, ctx.action("second"), EffectState.AMBIGUOUS)
    expect_refusal(
        "resolve attempt 2 with a verdict about attempt 1",
        partial(store.resolve_effect, key, EffectState.FAILED, RESOLVER, attempt=1),
        InvalidArgument,
    )
    after = store.get_effect(key)
    check(
        after is not None and (after.state, after.attempt) == (EffectState.AMBIGUOUS, 2),
        f"a stale verdict moved attempt 2: {after}",
    )
    resolved = store.resolve_effect(key, EffectState.COMMITTED, RESOLVER, attempt=2)
    check(
        (resolved.state, resolved.attempt) == (EffectState.COMMITTED, 2),
        f"control: attempt 2 resolved to {resolved.state} at attempt {resolved.attempt}",
    )
    return "a verdict for attempt 1 refused on attempt 2; attempt 2's own verdict resolved"


def resolver_recorded(ctx: CaseContext) -> str:
    """``resolved_by`` is returned, stored and evented (``EFFECT_RESOLVED`` naming the
    resolver and ``by``); a FAILED verdict's error names the resolver and keeps the error it
    replaced; an unresolved record has none; a renewal clears it."""
    store = ctx.scratch.open()
    for name in ("resolved", "unresolved"):
        settle(store, ctx.key(name), ctx.action(name), EffectState.AMBIGUOUS)
    returned = store.resolve_effect(ctx.key("resolved"), EffectState.FAILED, RESOLVER, by="human")
    stored = store.get_effect(ctx.key("resolved"))
    check(returned.resolved_by == RESOLVER, f"resolve returned resolved_by={returned.resolved_by}")
    error = returned.error or ""
    check(
        RESOLVER in error and "conformance: ambiguous" in error,
        f"a FAILED verdict's error does not name the resolver and the old error: {error!r}",
    )
    check(
        stored is not None and stored.resolved_by == RESOLVER,
        f"the stored record has resolved_by={stored.resolved_by if stored else None}",
    )
    events = [
        e for e in store.events(ctx.action("resolved")) if e.type is EventType.EFFECT_RESOLVED
    ]
    check(
        len(events) == 1
        and events[0].data.get("resolver") == RESOLVER
        and events[0].data.get("resolved_by") == "human",
        f"EFFECT_RESOLVED does not name the resolver: {[dict(e.data) for e in events]}",
    )
    unresolved = store.get_effect(ctx.key("unresolved"))
    check(
        unresolved is not None and unresolved.resolved_by is None,
        "control: an unresolved record claims a resolver",
    )
    start(store, ctx.key("resolved"), ctx.action("renewal"))
    renewed = store.get_effect(ctx.key("resolved"))
    check(
        renewed is not None and renewed.resolved_by is None,
        "a renewal kept the previous attempt's resolver",
    )
    return "resolver returned, stored, evented; absent when unresolved; cleared on renewal"


CASES: Final = (
    Case.of("resolution", "only-ambiguous", only_ambiguous),
    Case.of("resolution", "only-to-committed-or-failed", only_to_terminal),
    Case.of("resolution", "only-that-attempt", only_that_attempt),
    Case.of("resolution", "resolver-recorded", resolver_recorded),
)
