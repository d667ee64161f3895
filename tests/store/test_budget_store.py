"""Budget consumption on the SQLite store: eight OS processes behind a barrier never pass the
limit; windows roll over exactly at the boundary on the manual clock; a charge given back
returns once. (The same on Postgres: tests/postgres/test_budgets_pg.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctrlrun._time import ManualClock
from ctrlrun.kernel.budget import Budget, BudgetScope
from ctrlrun.store.budgets import budget_spend, consume_budget, give_back_budget, peek_budget
from ctrlrun.store.sqlite import SQLiteStateStore
from support.budget_race import check_rounds, processes, race_budget

DAY = timedelta(days=1)
MIDNIGHT = datetime(2026, 3, 5, tzinfo=UTC)


@pytest.mark.timeout(180)
def test_eight_processes_never_pass_the_limit(tmp_path: Path) -> None:
    """Eight processes, five rounds: each round exactly the amounts that fit are consumed."""
    path = tmp_path / "store.db"
    SQLiteStateStore(path).close()  # migrate once, before the race
    answers = race_budget(processes(), f"sqlite:///{path}")
    store = SQLiteStateStore(path)
    check_rounds(answers, {budget_id: spent for budget_id, _, spent in budget_spend(store)})
    store.close()


def test_window_rolls_over_exactly_at_the_boundary(tmp_path: Path) -> None:
    """The last instant of a window is still full; the boundary instant opens an empty one."""
    clock = ManualClock(MIDNIGHT - timedelta(seconds=2))
    store = SQLiteStateStore(tmp_path / "store.db", clock=clock)
    budget = Budget("amount", 100, window=DAY)
    assert consume_budget(store, budget, "b", 100, "a1")[0]
    clock.advance(timedelta(seconds=1))  # 23:59:59, same window
    ok, state = consume_budget(store, budget, "b", 1, "a2")
    assert not ok and state.spent_before == 100 and state.window_start == MIDNIGHT - DAY
    clock.advance(timedelta(seconds=1))  # exactly midnight: the next window
    ok, state = consume_budget(store, budget, "b", 100, "a3")
    assert ok and state.spent_before == 0 and state.spent_after == 100
    assert state.window_start == MIDNIGHT
    store.close()


def test_give_back_returns_once_and_peek_consumes_nothing(tmp_path: Path) -> None:
    """A charge given back frees its amount exactly once; a peek writes nothing."""
    store = SQLiteStateStore(tmp_path / "store.db", clock=ManualClock(MIDNIGHT))
    budget = Budget("amount", 500, BudgetScope.AGENT)
    assert consume_budget(store, budget, "pay:agent:a", 400, "act1")[0]
    assert peek_budget(store, budget, "pay:agent:a", 200).spent_before == 400
    assert peek_budget(store, budget, "pay:agent:a", 200).spent_before == 400
    assert not consume_budget(store, budget, "pay:agent:a", 200, "act2")[0]
    assert give_back_budget(store, "act1")
    assert not give_back_budget(store, "act1")  # a second give-back changes nothing
    assert not give_back_budget(store, "never-charged")
    ok, state = consume_budget(store, budget, "pay:agent:a", 200, "act2")
    assert ok and state.spent_before == 0
    store.close()


def test_force_consumes_past_the_limit(tmp_path: Path) -> None:
    """An approved call (force) consumes even past the limit, and the state says so."""
    store = SQLiteStateStore(tmp_path / "store.db", clock=ManualClock(MIDNIGHT))
    budget = Budget("amount", 100)
    assert consume_budget(store, budget, "b", 90, "a1")[0]
    ok, state = consume_budget(store, budget, "b", 50, "a2", force=True)
    assert ok and (state.spent_before, state.spent_after, state.limit) == (90, 140, 100)
    ok, state = consume_budget(store, budget, "b", 500, "a3", force=True)  # fresh row path too
    assert ok and state.spent_after == 640
    store.close()
