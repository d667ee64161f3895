"""Store fixtures: a real SQLite file per test and a clock the test moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctrlrun.store.sqlite import SQLiteStateStore


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "state.db"


@pytest.fixture
def store(db_path, clock):
    opened = SQLiteStateStore(db_path, clock=clock)
    yield opened
    opened.close()
