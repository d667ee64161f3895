"""Lease time is the database's clock; the application's clock is measured against it and its
skew reported, never obeyed."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import cycle

import pytest

from ctrlrun._time import utc_now
from ctrlrun.errors import AmbiguousEffect, DuplicateEffect, DuplicateState, InvalidArgument
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventType
from ctrlrun.store.protocol import StartRequest
from ctrlrun.testing import ManualClock
from support.store_calls import start

from .conftest import KEY

pytestmark = pytest.mark.postgres


def skew_events(store):
    return [e for e in store.events() if e.type is EventType.CLOCK_SKEW_DETECTED]


def server_now(pg_schema) -> datetime:
    with pg_schema.connect() as conn:
        return conn.execute("SELECT clock_timestamp()").fetchone()[0]


class TestDatabaseClock:
    def test_leases_are_stamped_with_the_servers_clock_not_the_applications(
        self, open_store, pg_schema, monkeypatch
    ):
        wrong = ManualClock(utc_now() - timedelta(days=3650))  # the host's clock is years off
        monkeypatch.setattr("ctrlrun.store.postgres.store.utc_now", wrong)
        store = open_store()
        before = server_now(pg_schema)
        started = start(store)
        after = server_now(pg_schema)
        record = store.get_effect(KEY)
        assert before <= record.created_at <= after
        assert started.reservation.lease_expires_at == record.created_at + timedelta(minutes=5)
        [event] = skew_events(store)  # observed and reported ...
        assert event.data["direction"] == "behind" and event.data["trigger"] == "open"

    def test_skew_never_changes_a_lease_decision(self, open_store, monkeypatch):
        ahead = ManualClock(utc_now() + timedelta(hours=2))  # far past any lease on this host
        monkeypatch.setattr("ctrlrun.store.postgres.store.utc_now", ahead)
        first, second = open_store(), open_store()
        start(first)
        with pytest.raises(DuplicateEffect) as caught:  # ... but leases follow the server
            start(second, "act_2")
        assert caught.value.state is DuplicateState.IN_PROGRESS
        assert first.get_effect(KEY).state is EffectState.EXECUTING


class TestSkewReports:
    @pytest.mark.parametrize(("offset", "direction"), [(10, "ahead"), (-10, "behind")])
    def test_a_skewed_clock_is_reported_at_open(self, open_store, offset, direction):
        clock = ManualClock(utc_now() + timedelta(seconds=offset))
        store = open_store(clock=clock)
        [event] = skew_events(store)
        assert event.action_id is None and event.effect_key is None
        assert (event.data["direction"], event.data["trigger"]) == (direction, "open")
        assert abs(event.data["skew_us"] - offset * 1_000_000) < 2_000_000
        assert event.data["threshold_us"] == 1_000_000 and event.data["bound_us"] == 0
        assert store.clock_skew.exceeded

    def test_an_aligned_clock_reports_nothing(self, open_store):
        store = open_store(clock=utc_now)
        assert skew_events(store) == [] and not store.clock_skew.exceeded

    def test_below_the_threshold_reports_nothing(self, open_store):
        store = open_store(
            clock=ManualClock(utc_now() + timedelta(seconds=3)),
            clock_skew_threshold=timedelta(seconds=30),
        )
        assert skew_events(store) == [] and store.clock_skew.skew > timedelta(seconds=2)
        with pytest.raises(InvalidArgument):
            open_store(clock_skew_threshold=timedelta(0))

    def test_latency_alone_never_manufactures_a_report(self, open_store):
        """Readings 4 s apart around the server's: the uncertainty is subtracted, not reported."""
        offsets = cycle([timedelta(seconds=-2), timedelta(seconds=2)])
        store = open_store(clock_skew_threshold=timedelta(seconds=1))
        store._app_clock = lambda: utc_now() + next(offsets)
        store._check_skew("open")
        assert store.clock_skew.bound >= timedelta(seconds=2)
        assert not store.clock_skew.exceeded and skew_events(store) == []

    def test_a_lapsed_lease_triggers_one_measurement_per_interval(self, open_store):
        clock = ManualClock(utc_now())
        store = open_store(clock=clock)
        short = timedelta(seconds=1)
        for key in ("refund:pay_1", "refund:pay_2", "refund:pay_3"):
            store.start_action(StartRequest(action_id=f"act_{key}", effect_key=key, lease=short))
        lapses = iter(["refund:pay_1", "refund:pay_2", "refund:pay_3"])

        def contend() -> None:
            with pytest.raises(AmbiguousEffect):
                start(store, "act_late", next(lapses))

        clock.advance(timedelta(minutes=6))
        contend()
        [event] = skew_events(store)
        assert (event.data["trigger"], event.action_id, event.effect_key) == (
            "lease_expired",
            "act_late",
            "refund:pay_1",
        )
        clock.advance(timedelta(seconds=2))
        contend()  # another lapse 2 s later: not due again
        assert len(skew_events(store)) == 1
        clock.advance(timedelta(minutes=5))
        contend()  # an interval later: due again
        assert len(skew_events(store)) == 2
