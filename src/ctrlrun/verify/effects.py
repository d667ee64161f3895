"""G3, G5 and G8: a committed effect is not repeated, an unknown outcome blocks a blind retry,
and only ``NotExecuted`` means "did not happen"."""

from __future__ import annotations

from functools import partial
from typing import Final

from ctrlrun.errors import AmbiguousEffect, DuplicateEffect, NotExecuted
from ctrlrun.kernel.effect import EffectState
from ctrlrun.runtime.control import Control

from .lab import Lab, NotApplicable, Passed, Remote, nothing_admitted
from .synthesis import PREFIX, Vector, variants

NO_EFFECT: Final = "no admitted action declares an effect (an `effect:` key template)"


def _effect_target(lab: Lab, extra: str = "") -> Vector:
    picked = lab.pick(lambda t: t.entry.effect is not None)
    if picked is None:
        raise NotApplicable(NO_EFFECT + extra)
    return picked[1]


def _state(lab: Lab, key: str | None) -> tuple[str, int | None, str | None]:
    record = lab.store.get_effect(key) if key else None
    if record is None:
        return ("absent", None, None)
    return (str(record.state), record.attempt, record.action_id)


def duplicate_effect_refused(lab: Lab) -> Passed:
    """G3. The same action twice on one effect key: the first commits (the control), the
    second is refused ``DuplicateEffect(state=committed)``; the executor ran once; the record
    still names attempt 1 and the first action."""
    vector = _effect_target(lab)
    control, remote = lab.control(), Remote()
    first = lab.control_ok("the first attempt", partial(lab.present, control, vector, remote))
    lab.check(remote.calls == 1, f"control: the first attempt ran {remote.calls} times")
    lab.expect(
        "the same action again",
        partial(lab.present, control, vector, remote),
        DuplicateEffect,
        state="committed",
    )
    lab.check(remote.calls == 1, f"the executor ran {remote.calls} times on one effect key")
    state = _state(lab, vector.effect_key)
    lab.check(
        state == ("committed", 1, first["action_id"]),
        f"the record is {state}, expected committed attempt 1 by the first action",
    )
    return Passed(
        lab.action,
        f"{vector.effect_key}: second attempt refused as duplicate (committed), executor 1 call",
    )


def ambiguous_blocks_retry(lab: Lab) -> Passed:
    """G5. On one effect key: attempt 1 raises ``NotExecuted`` → FAILED, and the retry IS
    admitted (the control: retries are not all blocked); that attempt times out → AMBIGUOUS
    with an ``ambiguous`` receipt; the blind retry is refused ``AmbiguousEffect``, the executor
    not called again, the record still AMBIGUOUS at attempt 2."""
    picked = lab.pick(lambda t: t.entry.effect is not None and (t.entry.max_attempts or 2) >= 2)
    if picked is None:
        if lab.pick(lambda t: t.entry.effect is not None) is None:
            raise NotApplicable(NO_EFFECT)
        raise NotApplicable(
            "every admitted action with an effect has max_attempts: 1, so no retry is ever"
            " admitted and a blind retry cannot be told from any retry"
        )
    vector, key = picked[1], picked[1].effect_key
    control = lab.control()
    remote = Remote(NotExecuted(f"{PREFIX}: not sent"), TimeoutError(f"{PREFIX}: reply lost"))
    first = partial(lab.present, control, vector, remote)
    lab.expect("control: attempt 1 (NotExecuted)", first, NotExecuted)
    lab.check(_state(lab, key)[:2] == ("failed", 1), f"after NotExecuted: {_state(lab, key)}")
    lab.expect(
        "control: the retry (times out)",
        partial(lab.present, control, vector, remote),
        TimeoutError,
    )
    lab.check(
        remote.calls == 2,
        f"control failed: the retry after NotExecuted was not admitted ({remote.calls} calls)",
    )
    lab.check(_state(lab, key)[:2] == ("ambiguous", 2), f"after a timeout: {_state(lab, key)}")
    lab.expect("the blind retry", partial(lab.present, control, vector, remote), AmbiguousEffect)
    lab.check(remote.calls == 2, f"the blind retry reached the executor ({remote.calls} calls)")
    lab.check(
        _state(lab, key)[:2] == ("ambiguous", 2), f"after the blind retry: {_state(lab, key)}"
    )
    results = [r.document["result"] for r in lab.store.receipts()]
    lab.check(
        results[-2:] == ["ambiguous", "blocked"],
        f"receipts say {results}, expected …ambiguous, blocked",
    )
    return Passed(
        lab.action,
        f"{key}: NotExecuted → failed, retry admitted → timeout → ambiguous, blind retry"
        " refused (executor 2 calls in all)",
    )


UNKNOWN: Final = RuntimeError(f"{PREFIX}: an exception the executor did not classify")


def unknown_exception_ambiguous(lab: Lab) -> Passed:
    """G8. An executor raising an unclassified exception leaves the outcome AMBIGUOUS (the
    receipt says ``ambiguous``; with an effect key the record is AMBIGUOUS, never FAILED) and
    the caller gets that very exception. Control: ``NotExecuted`` → FAILED, on a second key
    (or first on the same key, when the action forms one key but allows a retry)."""
    picked = lab.pick(lambda t: t.entry.effect is not None) or lab.pick(lambda t: True)
    if picked is None:
        raise NotApplicable(nothing_admitted(lab.policy))
    vector = picked[1]
    keys = variants(lab.policy, vector.target, 2) if vector.effect_key else [vector]
    if vector.effect_key and len(keys) < 2 and (vector.target.entry.max_attempts or 2) < 2:
        raise NotApplicable(
            f"{vector.target.entry.name} forms one effect key and allows one attempt, so no"
            " key is left for the control"
        )
    control = lab.control()
    _not_executed_fails(lab, control, keys[-1])
    remote = Remote(UNKNOWN)
    caught = lab.expect(
        "an unclassified exception", partial(lab.present, control, vector, remote), RuntimeError
    )
    lab.check(caught is UNKNOWN, f"the caller got {caught!r}, not the executor's exception")
    result = lab.store.receipts()[-1].document["result"]
    lab.check(result == "ambiguous", f"the receipt says {result}, not ambiguous")
    where = "receipt"
    if vector.effect_key:
        state = _state(lab, vector.effect_key)
        lab.check(state[0] == EffectState.AMBIGUOUS, f"the record is {state}, not ambiguous")
        where = f"record and receipt on {vector.effect_key}"
    return Passed(
        lab.action,
        f"RuntimeError → ambiguous ({where}), re-raised to the caller; control: NotExecuted"
        " → failed",
    )


def _not_executed_fails(lab: Lab, control: Control, vector: Vector) -> None:
    remote = Remote(NotExecuted(f"{PREFIX}: provably not sent"))
    lab.expect("control: NotExecuted", partial(lab.present, control, vector, remote), NotExecuted)
    result = lab.store.receipts()[-1].document["result"]
    lab.check(result == "failed", f"control failed: NotExecuted gave a {result} receipt")
    if vector.effect_key:
        state = _state(lab, vector.effect_key)
        lab.check(state[0] == EffectState.FAILED, f"control failed: NotExecuted left {state}")
