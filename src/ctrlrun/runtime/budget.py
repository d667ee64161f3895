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
from ctrlrun.kernel.budget import BudgetCharge
from ctrlrun.kernel.policy_model import ActionPolicy

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
