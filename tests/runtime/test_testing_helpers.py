"""``ctrlrun.testing``: a manual clock, a Control over policy text on a real SQLite store, and
a sink that captures what a Control emits."""

from __future__ import annotations

from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun.testing import CapturingSink, ManualClock, control_for
from support.policies import POLICY


def test_control_for_runs_real_calls_and_captures_their_receipts(tmp_path):
    control = control_for(POLICY, tmp_path)
    sink = control.sinks[0]
    assert isinstance(sink, CapturingSink)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        return amount

    try:
        with ctrlrun.context("bot"):
            refund("pay_1", 5)
            with pytest.raises(ctrlrun.DuplicateEffect):
                refund("pay_1", 5)
            with pytest.raises(ctrlrun.ApprovalRequired):
                refund("pay_2", 200_000)
        assert sink.results == ["committed", "blocked"]
        assert [kind for kind, _ in sink.approvals] == ["requested"]
        assert (tmp_path / "state.db").is_file()
    finally:
        control.store.close()


def test_the_manual_clock_moves_only_forward(tmp_path):
    clock = ManualClock()
    start = clock()
    assert clock.advance(timedelta(minutes=16)) == start + timedelta(minutes=16)
    with pytest.raises(ValueError):
        clock.advance(timedelta(seconds=-1))
    control = control_for(POLICY, tmp_path, clock=clock)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        return amount

    try:
        with ctrlrun.context("bot"), pytest.raises(ctrlrun.ApprovalRequired) as first:
            refund("pay_2", 200_000)
        clock.advance(timedelta(minutes=16))  # the request lapsed: a new one
        with ctrlrun.context("bot"), pytest.raises(ctrlrun.ApprovalRequired) as second:
            refund("pay_2", 200_000)
        assert first.value.request_id != second.value.request_id
    finally:
        control.store.close()
