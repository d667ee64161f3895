"""Eight OS processes spending against one budget behind a barrier, on any store URL.

Each child opens the store named by its URL, proves it imported the tree under test, and for
every round waits at the barrier and consumes once against that round's budget (a fresh
budget id per round). The parent checks that no round's consumption passed the limit and
that exactly as many fitted as the limit allows (the upsert neither overshoots nor starves).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import ctrlrun
from ctrlrun.kernel.budget import Budget

SOURCE = str(Path(ctrlrun.__file__).resolve().parent)
PROCESSES = 8
ROUNDS = 5
AMOUNT = 300
LIMIT = 1000  # three of eight fit each round; the fourth would reach 1200
# A ten-year window: every child of a round is in the same window whatever the wall clock.
BUDGET = Budget(sum="amount", limit=LIMIT, window=timedelta(days=3650))


def spend(store_url: str, barrier: Any, results: Any) -> None:
    """One spender (runs in a child process)."""
    import ctrlrun
    from ctrlrun.store import open_store
    from ctrlrun.store.budgets import consume_budget

    assert str(Path(ctrlrun.__file__).resolve().parent) == SOURCE  # the tree under test
    store = open_store(store_url)
    try:
        for round_ in range(ROUNDS):
            barrier.wait(timeout=60)
            ok, state = consume_budget(
                store, BUDGET, f"race:{round_}", AMOUNT, f"act-{os.getpid()}-{round_}"
            )
            results.put((round_, ok, state.spent_before))
    finally:
        store.close()


def race_budget(ctx: Any, store_url: str) -> dict[int, list[tuple[bool, int]]]:
    """Run the spenders; every child's answers, by round."""
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    children = [
        ctx.Process(target=spend, args=(store_url, barrier, results)) for _ in range(PROCESSES)
    ]
    for child in children:
        child.start()
    answers: dict[int, list[tuple[bool, int]]] = {r: [] for r in range(ROUNDS)}
    for _ in range(PROCESSES * ROUNDS):
        round_, ok, before = results.get(timeout=120)
        answers[round_].append((ok, before))
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    return answers


def check_rounds(answers: dict[int, list[tuple[bool, int]]], spent: dict[str, int]) -> None:
    """Every round: at most the limit consumed, exactly as much as fits, and the store agrees."""
    fits = LIMIT // AMOUNT
    for round_, got in answers.items():
        consumed = [before for ok, before in got if ok]
        assert len(consumed) == fits, (round_, got)
        assert sorted(consumed) == [AMOUNT * i for i in range(fits)]  # each saw the one before
        assert spent[f"race:{round_}"] == fits * AMOUNT <= LIMIT


def processes() -> Any:
    return mp.get_context("forkserver")
