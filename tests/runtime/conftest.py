"""Runtime fixtures: a policy, a real SQLite store, a movable clock, and a counting remote."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctrlrun import Control, Policy, SQLiteStateStore
from support.policies import POLICY


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


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


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def store(tmp_path, clock):
    opened = SQLiteStateStore(tmp_path / "state.db", clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def control(store, clock):
    return Control(Policy.from_yaml(POLICY), store, clock=clock)


@pytest.fixture
def remote() -> Remote:
    return Remote()
