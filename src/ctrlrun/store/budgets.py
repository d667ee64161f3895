"""Budgets on a store, each operation its own write transaction: for operators (give back a
charge when ``resolve --failed`` settles an attempt) and for stats. A protected call consumes
inside its own reservation transaction instead (``store.ops.budgets``)."""

from __future__ import annotations

from datetime import datetime

from ctrlrun.kernel.budget import Budget, BudgetState
from ctrlrun.store.ops.budgets import (
    consume_in_txn,
    give_back_in_txn,
    peek_in_txn,
    spend_list_in_txn,
)
from ctrlrun.store.protocol import StateStore

__all__ = ["budget_spend", "consume_budget", "give_back_budget", "peek_budget"]


def consume_budget(
    store: StateStore,
    budget: Budget,
    budget_id: str,
    amount: int,
    action_id: str,
    *,
    force: bool = False,
) -> tuple[bool, BudgetState]:
    """``consume_in_txn`` in a transaction of its own."""
    return store.transact(
        lambda txn: consume_in_txn(txn, budget, budget_id, amount, action_id, force=force)
    )


def give_back_budget(store: StateStore, action_id: str) -> bool:
    """Return what ``action_id`` consumed (False: nothing, or given back already)."""
    return store.transact(lambda txn: give_back_in_txn(txn, action_id))


def peek_budget(store: StateStore, budget: Budget, budget_id: str, amount: int) -> BudgetState:
    """The state a call spending ``amount`` would meet now, consuming nothing."""
    return store.read(lambda txn: peek_in_txn(txn, budget, budget_id, amount))


def budget_spend(store: StateStore) -> tuple[tuple[str, datetime, int], ...]:
    """Every (budget id, window start, spent) row."""
    return store.read(spend_list_in_txn)
