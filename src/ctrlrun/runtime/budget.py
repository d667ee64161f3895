"""Runtime glue for budgets: what a protected call asks its reservation to consume.

The kernel (kernel/budget.py) names the budget and checks the amount; the store consumes in
the call's first transaction (store/ops/budgets.py) and gives a FAILED attempt's charge back
in its second. Unbudgeted calls get ``None`` here and pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final, NoReturn

from ctrlrun.errors import ActionDenied, DenyReason, Refused
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.budget import BudgetCharge, BudgetVerdict, OverBudget
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.policy_model import ActionPolicy, Decision
from ctrlrun.store import peek_budget
from ctrlrun.store.protocol import StartRequest, StateStore

DENIED_AT_START: Final = frozenset(
    {DenyReason.APPROVAL_DENIED, DenyReason.OVER_BUDGET, DenyReason.BUDGET_UNEVALUABLE}
)
"""Refusals of the first transaction recorded as ``denied`` (not ``blocked``): a person's or
the budget's answer, not the effect's state."""


def budget_charge(
    action: Action,
    entry: ActionPolicy | None,
    refuse: Callable[[ActionDenied], NoReturn],
    approval_id: str | None = None,
) -> BudgetCharge | None:
    """The charge ``action`` makes on its entry's budget (None: unbudgeted). A missing or
    non-whole-number amount goes to ``refuse`` (``ActionDenied(budget_unevaluable)``, recorded
    as denied) before anything is written. With ``approval_id`` the call presents an approval (the
    store consumes it in the same transaction, or refuses the whole start), so an ``over:
    approve`` budget is charged with ``force``: a person approved exactly this call, having
    been shown the budget's state on the request."""
    if entry is None or entry.budget is None:
        return None
    budget = entry.budget
    try:
        amount = budget.amount(action.plain_arguments, action.action_id)
    except ActionDenied as exc:
        refuse(exc)
    force = approval_id is not None and budget.over is OverBudget.APPROVE
    budget_id = budget.budget_id(action.name, action.principal.agent)
    return BudgetCharge(budget, budget_id, amount, force=force)


def request_charge(action: Action, entry: ActionPolicy | None) -> BudgetCharge | None:
    """The charge an approval request for ``action`` shows the budget's state for (None:
    unbudgeted, or an amount the call will be refused for anyway)."""
    if entry is None or entry.budget is None:
        return None
    budget = entry.budget
    try:
        amount = budget.amount(action.plain_arguments)
    except ActionDenied:
        return None
    return BudgetCharge(budget, budget.budget_id(action.name, action.principal.agent), amount)


def needs_a_person(exc: Refused, request: StartRequest) -> bool:
    """Whether the start was refused only because its charge would pass an ``over: approve``
    budget's limit with no approval presented: the call is then asked about, not denied (the
    refused transaction rolled back, so nothing is reserved or consumed meanwhile)."""
    charge = request.budget
    return (
        isinstance(exc, ActionDenied)
        and exc.reason is DenyReason.OVER_BUDGET
        and charge is not None
        and not charge.force
        and charge.budget.over is OverBudget.APPROVE
    )


def approved_start(request: StartRequest, approval_id: str, policy_hash: str) -> StartRequest:
    """``request`` presenting ``approval_id`` (granted for exactly this call under
    ``policy_hash``), its charge forced past the limit: the store consumes both together."""
    charge = request.budget
    assert charge is not None
    return replace(
        request,
        approval_id=approval_id,
        policy_hash=policy_hash,
        budget=replace(charge, force=True),
    )


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
