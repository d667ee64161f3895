"""Runtime fixtures: a policy, a real store (SQLite file and Postgres schema, each test on both),
a movable clock, and a counting remote."""

from __future__ import annotations

from pathlib import Path

import pytest

import ctrlrun
from ctrlrun import Control, SQLiteStateStore
from ctrlrun._time import utc_now
from ctrlrun.config import load_policy_text
from ctrlrun.testing import ManualClock
from support.clocks import DEFAULT_START
from support.policies import POLICY


class Remote:
    """A fake provider: records every call; can be told to act and then lose the reply."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.fail_with: list[BaseException] = []

    def __call__(self, **arguments):
        self.calls.append(arguments)
        if self.fail_with:
            raise self.fail_with.pop(0)
        return {"ok": True, "n": len(self.calls)}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Every protected-call test runs on both stores."""
    return str(request.param)


@pytest.fixture
def clock(backend: str) -> ManualClock:
    # Postgres measures the application clock against its own at open: start at the real time
    return ManualClock(DEFAULT_START) if backend == "sqlite" else ManualClock(utc_now())


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def store(request, backend, tmp_path, clock):
    if backend == "sqlite":
        opened = SQLiteStateStore(tmp_path / "state.db", clock=clock)
    else:
        from ctrlrun.postgres import PostgresStateStore

        pg_schema = request.getfixturevalue("pg_schema")
        opened = PostgresStateStore(pg_schema.url, schema=pg_schema.schema, clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def control(store, clock):
    return Control(load_policy_text(POLICY), store, clock=clock)


@pytest.fixture
def remote() -> Remote:
    return Remote()


@pytest.fixture
def refund(control, remote):
    """``stripe.refund`` protected by ``control``, calling ``remote``."""

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int, currency: str = "eur"):
        return remote(payment_id=payment_id, amount=amount, currency=currency)

    return refund
