"""The refusal brake's counting (the adapters' tests run it under the real frameworks), and
the kernel's decision before a person is asked (``kernel.call``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ctrlrun import AlreadyCommitted, AmbiguousEffect, InProgress, InvalidArgument, RefusalLoop
from ctrlrun.integrations.brake import RefusalBrake, call_fingerprint
from ctrlrun.kernel.call import refusal_before_asking
from ctrlrun.kernel.effect import EffectRecord, EffectState
from support.clocks import DEFAULT_START


class Run:
    """A per-run object, as a framework's usage counter is."""


def test_identical_calls_share_a_fingerprint_and_others_do_not():
    assert call_fingerprint("refund", {"a": 1, "b": 2}) == call_fingerprint(
        "refund", {"b": 2, "a": 1}
    )
    assert call_fingerprint("refund", {"a": 1}) != call_fingerprint("refund", {"a": 2})
    assert call_fingerprint("refund", {"a": 1}) != call_fingerprint("charge", {"a": 1})
    assert call_fingerprint("refund", {"a": 1.5}) == call_fingerprint("refund", {"a": 1.5})


def test_the_limit_th_identical_refusal_in_one_run_raises():
    brake, run = RefusalBrake(3), Run()
    brake.refused(run, "refund", {"a": 1}, "no")
    brake.refused(run, "refund", {"a": 2}, "no")  # another call: counted apart
    brake.refused(run, "refund", {"a": 1}, "no")
    brake.refused(Run(), "refund", {"a": 1}, "no")  # another run: counted apart
    with pytest.raises(RefusalLoop) as stopped:
        brake.refused(run, "refund", {"a": 1}, "Not allowed")
    assert (stopped.value.refusals, stopped.value.tool, stopped.value.reason) == (
        3,
        "refund",
        "refusal_loop",
    )
    assert "refused 3 times" in stopped.value.for_model()


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_a_bad_limit_is_refused(limit):
    with pytest.raises(InvalidArgument):
        RefusalBrake(limit)


def record(state, lease=None):
    return EffectRecord(
        "refund:p", state, "act_1", 1, DEFAULT_START, DEFAULT_START, lease_expires_at=lease
    )


def test_the_kernel_refuses_before_asking_only_about_what_ran_runs_or_is_unknown():
    now = DEFAULT_START
    live, lapsed = now + timedelta(minutes=1), now - timedelta(seconds=1)
    done = refusal_before_asking(record(EffectState.COMMITTED), now=now)
    assert isinstance(done, AlreadyCommitted)
    assert isinstance(
        refusal_before_asking(record(EffectState.EXECUTING, live), now=now), InProgress
    )
    unknown = record(EffectState.AMBIGUOUS)
    assert isinstance(refusal_before_asking(unknown, now=now), AmbiguousEffect)
    assert refusal_before_asking(unknown, now=now, reconcilable=True) is None
    assert refusal_before_asking(record(EffectState.RESERVED, lapsed), now=now) is None
    assert refusal_before_asking(record(EffectState.FAILED), now=now) is None
    assert refusal_before_asking(None, now=now) is None
