"""The executor ran and the outcome write failed: the error says so (``OutcomeUnrecorded``),
never "nothing was committed"; the key stays held, and is AMBIGUOUS once its lease expires."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import AmbiguousEffect, Control, EffectState, OutcomeUnrecorded, StoreError
from ctrlrun.config import load_policy_text
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.testing import ManualClock
from support.clocks import DEFAULT_START
from support.policies import POLICY


def test_on_sqlite_a_locked_database_at_the_outcome_write(tmp_path):
    clock = ManualClock(DEFAULT_START)
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db", clock=clock, busy_timeout=0.1)
    control = Control(load_policy_text(POLICY), store, clock=clock, lease=timedelta(minutes=1))
    blocker = sqlite3.connect(tmp_path / "state.db", isolation_level=None)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        blocker.execute("BEGIN EXCLUSIVE")  # another process takes the database meanwhile
        return "refunded"

    with ctrlrun.context("bot"), pytest.raises(OutcomeUnrecorded) as caught:
        refund("pay_1", 5)
    blocker.execute("ROLLBACK")
    assert_unrecorded(caught.value, store, clock)


@pytest.mark.postgres
def test_on_postgres_a_cut_connection_that_cannot_come_back(pg_schema, pg_proxy):
    proxied = PostgresStateStore(pg_proxy.url, schema=pg_schema.schema)
    direct = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    control = Control(load_policy_text(POLICY), proxied, lease=timedelta(seconds=1))

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        pg_proxy.cut_before_commit()  # the outcome's COMMIT is lost...
        pg_proxy.refuse_connections()  # ...and the store cannot reconnect to settle it
        return "refunded"

    try:
        with ctrlrun.context("bot"), pytest.raises(OutcomeUnrecorded) as caught:
            refund("pay_1", 5)
        pg_proxy.refuse_connections(False)
        assert isinstance(caught.value.__cause__, StoreError)
        assert "the executor ran" in str(caught.value)
        assert "nothing was committed" not in str(caught.value)
        assert direct.get_effect("refund:pay_1").state is EffectState.EXECUTING
    finally:
        proxied.close()
        direct.close()


def assert_unrecorded(error, store, clock):
    assert error.effect_key == "refund:pay_1" and error.intended == "committed"
    assert "the executor ran" in str(error) and "AMBIGUOUS when its lease expires" in str(error)
    assert "nothing was committed" not in str(error)
    assert isinstance(error, StoreError) and isinstance(error.__cause__, StoreError)
    assert "Do not retry" in error.for_model()
    assert store.get_effect("refund:pay_1").state is EffectState.EXECUTING  # still held
    clock.advance(timedelta(minutes=2))
    control = Control(load_policy_text(POLICY), store, clock=clock)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        return "again"

    with ctrlrun.context("bot"), pytest.raises(AmbiguousEffect):
        refund("pay_1", 5)
