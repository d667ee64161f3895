"""Budget consumption and give-back inside a write transaction, identical for both stores.

Consumption is one conditional upsert on the (budget id, window start) row, in the same
transaction as the call's reservation, and a charge row naming the action, so giving back
(a FAILED attempt, ``resolve --failed``) returns exactly what was taken, once. Only budgeted
actions call these: an unbudgeted call pays nothing (docs/decisions/0028-budgets.md). The
window comes from the transaction's clock, the one leases are measured on.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ctrlrun.kernel.budget import Budget, BudgetCharge, BudgetState, over_budget
from ctrlrun.store.ops import Txn


def _key(txn: Txn, budget: Budget, budget_id: str, now: datetime) -> dict[str, Any]:
    return {"budget_id": budget_id, "window_start": txn.ts(budget.window_start(now))}


def spent_in_txn(txn: Txn, budget: Budget, budget_id: str, now: datetime | None = None) -> int:
    """What ``budget_id``'s current window holds (0 for a window nobody spent in)."""
    row = txn.one("budget_spent_get", _key(txn, budget, budget_id, now or txn.now))
    return 0 if row is None else int(row["spent"])


def peek_in_txn(txn: Txn, budget: Budget, budget_id: str, amount: int) -> BudgetState:
    """The state a call spending ``amount`` would meet, consuming nothing (observe mode)."""
    now = txn.now
    spent = spent_in_txn(txn, budget, budget_id, now)
    return BudgetState(
        budget_id, budget.window_start(now), budget.window, budget.limit, spent, amount
    )


def consume_in_txn(
    txn: Txn,
    budget: Budget,
    budget_id: str,
    amount: int,
    action_id: str,
    *,
    force: bool = False,
) -> tuple[bool, BudgetState]:
    """Consume ``amount`` for ``action_id`` when the window stays within the limit (or
    ``force``: a person approved going past it). Returns whether it was consumed and the
    state: before and after when consumed, the state it met (nothing written) when not."""
    now = txn.now
    key = _key(txn, budget, budget_id, now)
    params: Mapping[str, Any] = {**key, "amount": amount, "limit": budget.limit, "force": force}
    row = txn.one("budget_consume", params)
    start = budget.window_start(now)
    if row is None:
        spent = spent_in_txn(txn, budget, budget_id, now)
        return False, BudgetState(budget_id, start, budget.window, budget.limit, spent, amount)
    charge = {**key, "action_id": action_id, "amount": amount, "charged_at": txn.ts(now)}
    txn.run("budget_charge_insert", charge)
    before = int(row["spent"]) - amount
    return True, BudgetState(budget_id, start, budget.window, budget.limit, before, amount)


def charge_in_txn(txn: Txn, charge: BudgetCharge, action_id: str) -> BudgetState:
    """A protected call's consumption, in its reservation transaction: the state before and
    after, or ``ActionDenied(over_budget)`` (the transaction rolls back: nothing reserved)."""
    ok, state = consume_in_txn(
        txn, charge.budget, charge.budget_id, charge.amount, action_id, force=charge.force
    )
    if not ok:
        raise over_budget(state, action_id)
    return state


def give_back_in_txn(txn: Txn, action_id: str) -> bool:
    """Return what ``action_id`` consumed to its window; False when it consumed nothing or
    it was given back already (so a retry or a second resolve changes nothing)."""
    params = {"action_id": action_id, "returned_at": txn.ts(txn.now)}
    return txn.one("budget_return", params) is not None


def spend_list_in_txn(txn: Txn) -> tuple[tuple[str, datetime, int], ...]:
    """Every (budget id, window start, spent) row, for stats."""
    rows = txn.all("budget_spend_list", {})
    return tuple(
        (str(r["budget_id"]), txn.read_ts(r["window_start"]), int(r["spent"])) for r in rows
    )
