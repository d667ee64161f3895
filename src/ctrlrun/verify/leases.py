"""G10: a lease that lapses while its holder is silent makes the effect AMBIGUOUS, never free."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any, Final

from ctrlrun.errors import AmbiguousEffect, DuplicateEffect
from ctrlrun.kernel.event import EventType
from ctrlrun.runtime.control import Control

from .effects import NO_EFFECT
from .lab import Failed, Lab, NotApplicable, Passed, Remote
from .synthesis import Vector

LEASE: Final = timedelta(seconds=30)


def expired_lease_ambiguous(lab: Lab) -> Passed:
    """G10. Attempt 1 is admitted and its executor runs (the control that the action is
    admissible) — then stalls: inside it the injected clock reaches the lease's end and a
    contender is refused ``DuplicateEffect(in_progress)`` (the control that the lease, not
    something else, decides); one microsecond later a contender is refused ``AmbiguousEffect``
    and the record is AMBIGUOUS (``EFFECT_LEASE_EXPIRED``). When the stalled holder finally
    returns, its COMMIT is refused and the record stays AMBIGUOUS; a third contender is
    refused. No contender's executor ever runs."""
    picked = lab.pick(lambda t: t.entry.effect is not None)
    if picked is None:
        raise NotApplicable(NO_EFFECT)
    vector = picked[1]
    control = lab.control(lease=LEASE)
    contenders = Remote()
    seen: dict[str, Any] = {}
    holder = _stalled_holder(lab, control, vector, contenders, seen)
    try:
        lab.expect(
            "the stalled holder's late COMMIT",
            partial(lab.present, control, vector, holder),
            AmbiguousEffect,
        )
    except Failed as failed:
        if "admitted" not in seen:
            detail = f"control failed: the holder was never admitted ({failed.detail})"
            raise lab.fail(detail) from failed
        raise
    _after(lab, vector, seen.get("record"), contenders)
    lab.expect(
        "a third contender", partial(lab.present, control, vector, contenders), AmbiguousEffect
    )
    lab.check(contenders.calls == 0, f"a contender's executor ran {contenders.calls} times")
    return Passed(
        lab.action,
        f"{vector.effect_key}: held at the lease's end, AMBIGUOUS 1 µs later; the holder's"
        " late commit refused; no contender executed",
    )


def _stalled_holder(
    lab: Lab, control: Control, vector: Vector, contenders: Remote, seen: dict[str, Any]
) -> Callable[..., str]:
    """The holder's executor: it moves the clock past its own lease, watching contenders."""

    def stalled_holder(**arguments: Any) -> str:
        seen["admitted"] = True
        lab.clock.advance(LEASE)
        lab.expect(
            "control: a contender at the lease's last instant",
            partial(lab.present, control, vector, contenders),
            DuplicateEffect,
            state="in_progress",
        )
        lab.clock.advance(timedelta(microseconds=1))
        lab.expect(
            "a contender after the lease lapsed",
            partial(lab.present, control, vector, contenders),
            AmbiguousEffect,
        )
        seen["record"] = lab.store.get_effect(vector.effect_key)
        return "the holder's late result"

    return stalled_holder


def _after(lab: Lab, vector: Vector, lapsed: Any, contenders: Remote) -> None:
    lab.check(
        lapsed is not None and str(lapsed.state) == "ambiguous" and lapsed.attempt == 1,
        f"after the lapse the record was {lapsed}, not ambiguous at attempt 1",
    )
    record = lab.store.get_effect(vector.effect_key)
    lab.check(
        record is not None and str(record.state) == "ambiguous",
        f"after the holder returned the record is {record}, not ambiguous",
    )
    kinds = [e.type for e in lab.store.events() if e.effect_key == vector.effect_key]
    lab.check(EventType.EFFECT_LEASE_EXPIRED in kinds, f"no EFFECT_LEASE_EXPIRED: {kinds}")
