"""A budget's state as a person deciding an ``over: approve`` request reads it, and the check
every approver surface makes before showing it.

The store reads the (budget, window) row in the transaction that makes the request and keeps
what it found on the request's ``APPROVAL_REQUESTED`` event (and the notification's event):
the limit, what the window held, this call's amount, the window and whose spending it counts.
A surface shows that line only after checking it against what it can verify on its own: the
action the request binds (its hash is checked first: ``request_check``) must be the one the
budget names and must spend exactly that amount, the window must be one a tumbling window can
start, and, when the policy at hand is the one the request was made under, the budget must be
that policy's. Facts that fail the check are never shown as a budget, only as the mismatch.
The line is made from typed fields here, never from argument text, and the one free-text part
(the budget id, which holds the agent's name) is escaped: an argument cannot forge it.
Pure: no I/O (docs/decisions/0028-budgets.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ctrlrun._time import decode_instant, display_instant, encode_instant
from ctrlrun.display import escape_text
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.approval_rules import parse_duration, render_duration
from ctrlrun.kernel.argument_display import Money, format_money
from ctrlrun.kernel.budget import Budget, BudgetCharge, BudgetScope, BudgetState, check_amount

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class BudgetFacts:
    """What the budget held when a person was asked: ``spent`` in the window starting at
    ``window_start`` (``window`` long) of ``limit``, and this call's ``amount`` of argument
    ``sum``, counted per ``per``."""

    budget_id: str
    per: BudgetScope
    sum: str
    window: timedelta
    window_start: datetime
    limit: int
    spent: int
    amount: int

    @property
    def window_end(self) -> datetime:
        return self.window_start + self.window

    @property
    def after(self) -> int:
        return self.spent + self.amount

    @property
    def over_by(self) -> int:
        """How far past the limit this call would take the window (0: it fits)."""
        return max(self.after - self.limit, 0)

    @classmethod
    def of(cls, charge: BudgetCharge, state: BudgetState) -> BudgetFacts:
        """The facts of ``charge`` meeting ``state`` (read by the store)."""
        budget = charge.budget
        return cls(
            budget_id=state.budget_id,
            per=budget.per,
            sum=budget.sum,
            window=budget.window,
            window_start=state.window_start,
            limit=state.limit,
            spent=state.spent_before,
            amount=state.amount,
        )

    def to_dict(self) -> dict[str, Any]:
        """The stored form (stable names)."""
        return {
            "budget_id": self.budget_id,
            "per": self.per.value,
            "sum": self.sum,
            "window": render_duration(self.window),
            "window_start": encode_instant(self.window_start),
            "window_end": encode_instant(self.window_end),
            "limit": self.limit,
            "spent": self.spent,
            "amount": self.amount,
            "after": self.after,
        }

    @classmethod
    def from_dict(cls, data: object) -> BudgetFacts:
        """The facts of a stored form; ``InvalidArgument`` when it is not one this version
        writes (a field missing or of the wrong type, or totals that do not add up)."""
        if not isinstance(data, Mapping):
            raise InvalidArgument("budget facts are not a mapping")
        try:
            facts = cls(
                budget_id=_text(data["budget_id"]),
                per=BudgetScope(_text(data["per"])),
                sum=_text(data["sum"]),
                window=parse_duration(_text(data["window"])),
                window_start=decode_instant(_text(data["window_start"])),
                limit=check_amount(data["limit"], "limit"),
                spent=check_amount(data["spent"], "spent"),
                amount=check_amount(data["amount"], "amount"),
            )
        except (KeyError, ValueError) as exc:  # InvalidArgument is a ValueError
            raise InvalidArgument(f"budget facts out of shape: {exc}") from None
        if data.get("after") != facts.after or data.get("window_end") != encode_instant(
            facts.window_end
        ):
            raise InvalidArgument("budget facts do not add up")
        return facts

    def describe(self, money: Money | None = None) -> str:
        """One line for a person, every part typed but the (escaped) budget id; amounts as
        ``format_money`` writes them when the action displays its ``sum`` as ``money``."""

        def n(value: int) -> str:
            return str(value) if money is None else format_money(value, money)

        over = f", {n(self.over_by)} over the limit" if self.over_by else ", within the limit"
        return (
            f"budget {escape_text(self.budget_id)} (per {self.per.value}): spent {n(self.spent)}"
            f" of {n(self.limit)} in the {render_duration(self.window)} window"
            f" {display_instant(self.window_start)} to {display_instant(self.window_end)};"
            f" this call {n(self.amount)} makes {n(self.after)}{over}"
        )


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {type(value).__name__}")
    return value


def mismatch(facts: BudgetFacts, action: Mapping[str, Any], budget: Budget | None) -> str | None:
    """Why ``facts`` cannot be shown beside ``action`` (the request's hash-checked action),
    or None when they agree with it and with ``budget`` (the policy's, when the policy at
    hand is the request's; None: not checked against a policy)."""
    name, principal = action.get("name"), action.get("principal")
    agent = principal.get("agent") if isinstance(principal, Mapping) else None
    arguments = action.get("arguments")
    if not isinstance(name, str) or not isinstance(agent, str):
        return "the request's action names no action and agent"
    expected = f"{name}:agent:{agent}" if facts.per is BudgetScope.AGENT else f"{name}:shared"
    if facts.budget_id != expected:
        return f"the budget is not this action's ({expected})"
    amount = arguments.get(facts.sum) if isinstance(arguments, Mapping) else None
    if isinstance(amount, bool) or amount != facts.amount:
        return f"this call's {facts.sum} is not the amount recorded"
    length = int(facts.window.total_seconds())
    if length < 1 or int((facts.window_start - _EPOCH).total_seconds()) % length:
        return "the window does not start where a window can"
    if budget is not None and (budget.sum, budget.limit, budget.per, budget.window) != (
        facts.sum,
        facts.limit,
        facts.per,
        facts.window,
    ):
        return "the policy's budget is not the one recorded"
    return None


@dataclass(frozen=True, slots=True)
class ShownBudget:
    """What a surface shows of a request's budget: the checked ``facts`` (None when there
    are none, or they failed the check: ``problem`` says why)."""

    facts: BudgetFacts | None = None
    problem: str | None = None
    money: Money | None = None  # how the action displays the budget's sum (not evidence)

    def line(self) -> str | None:
        """The line to show (None: the request has no budget)."""
        if self.facts is not None:
            return self.facts.describe(self.money)
        if self.problem is not None:
            return f"budget facts NOT shown: {self.problem}"
        return None


def shown_budget(
    data: object,
    action: Mapping[str, Any],
    budget: Budget | None,
    displays: Mapping[str, Money] | None = None,
) -> ShownBudget:
    """The budget a surface shows for a request whose recorded facts are ``data`` (None: the
    request recorded none), checked (``mismatch``); ``displays`` (the policy's ``display:``
    for the action) shows its amounts as money, the numbers beside them."""
    if data is None:
        return ShownBudget()
    try:
        facts = BudgetFacts.from_dict(data)
    except InvalidArgument as exc:
        return ShownBudget(problem=exc.message)
    problem = mismatch(facts, action, budget)
    if problem is not None:
        return ShownBudget(problem=problem)
    return ShownBudget(facts, money=(displays or {}).get(facts.sum))
