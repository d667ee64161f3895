"""Runtime glue for budgets: what a protected call asks its reservation to consume.

The kernel (kernel/budget.py) names the budget and checks the amount; the store consumes in
the call's first transaction (store/ops/budgets.py) and gives a FAILED attempt's charge back
in its second. Unbudgeted calls get ``None`` here and pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NoReturn

from ctrlrun.errors import ActionDenied, DenyReason
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.budget import BudgetCharge, BudgetVerdict
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.policy_model import ActionPolicy, Decision
from ctrlrun.store import peek_budget
from ctrlrun.store.protocol import StateStore

DENIED_AT_START: Final = frozenset(
    {DenyReason.APPROVAL_DENIED, DenyReason.OVER_BUDGET, DenyReason.BUDGET_UNEVALUABLE}
)
"""Refusals of the first transaction recorded as ``denied`` (not ``blocked``): a person's or
the budget's answer, not the effect's state."""


def budget_charge(
    action: Action, entry: ActionPolicy | None, refuse: Callable[[ActionDenied], NoReturn]
) -> BudgetCharge | None:
    """The charge ``action`` makes on its entry's budget (None: unbudgeted). A missing or
    non-whole-number amount goes to ``refuse`` (``ActionDenied(budget_unevaluable)``, recorded
    as denied) before anything is written."""
    if entry is None or entry.budget is None:
        return None
    budget = entry.budget
    try:
        amount = budget.amount(action.plain_arguments, action.action_id)
    except ActionDenied as exc:
        refuse(exc)
    return BudgetCharge(budget, budget.budget_id(action.name, action.principal.agent), amount)


def observed_budget(
    store: StateStore, action: Action, policy: Policy, decision: Decision, rule: str
) -> tuple[Decision, str, tuple[BudgetVerdict, str] | None]:
    """An observed call's budget, read without consuming: the verdict and the state it
    found; a non-whole-number amount turns the decision into a denial
    (``budget_unevaluable``), as enforcement would refuse it."""
    entry = policy.entry(action.name)
    if entry is None or entry.budget is None:
        return decision, rule, None
    budget = entry.budget
    try:
        amount = budget.amount(action.plain_arguments, action.action_id)
    except ActionDenied:
        return Decision.DENY, str(DenyReason.BUDGET_UNEVALUABLE), None
    state = peek_budget(
        store, budget, budget.budget_id(action.name, action.principal.agent), amount
    )
    return decision, rule, (budget.verdict(state.spent_before, amount), state.describe())
