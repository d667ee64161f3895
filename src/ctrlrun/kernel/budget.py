"""Budgets, decided purely: a cumulative limit on one numeric argument of an action.

A policy entry may carry ``budget: {sum: amount, limit: 500000, per: agent|shared,
window: 24h, over: deny|approve}``. Amounts are whole numbers only (``int``, never ``bool``
or ``float``, never negative): money is counted in minor units, as ``display`` shows it, so
sums are exact and Decimal rounding never enters a limit. Windows tumble, aligned to the Unix
epoch on the store's clock: a call at ``t`` spends in the window starting at
``floor(t / window) * window``, so every process agrees on the window without coordination
and a rollover happens exactly at the boundary (docs/decisions/0028-budgets.md).

The store keeps one row per (budget id, window start) with the amount spent and consumes with
one conditional upsert (``spent + amount <= limit``); this module names the budget, computes
the window and the amount, and says what a given spent total means for a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final, TypeVar

from ctrlrun._time import display_instant
from ctrlrun.errors import ActionDenied, DenyReason, InvalidArgument
from ctrlrun.kernel.approval_rules import parse_duration, render_duration

BUDGET_KEYS: Final = ("sum", "limit", "per", "window", "over")
MAX_LIMIT: Final = 2**63 - 1  # what both stores hold in an integer column
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_E = TypeVar("_E", bound=StrEnum)


class BudgetScope(StrEnum):
    """Whose spending a budget counts: each principal agent's own, or everyone's together."""

    AGENT = "agent"
    SHARED = "shared"


class OverBudget(StrEnum):
    """What happens to a call that would take a budget past its limit."""

    DENY = "deny"
    APPROVE = "approve"


class BudgetVerdict(StrEnum):
    """What a budget says about one call: it fits, it is refused, or a person must approve."""

    FITS = "fits"
    DENY = "deny"
    APPROVE = "approve"


def check_amount(value: object, what: str) -> int:
    """``value`` if it is a whole number from 0 to ``MAX_LIMIT``; ``InvalidArgument`` for a
    bool, a float, a negative or anything else (a float's rounding must never move a limit)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be a whole number (minor units), got {value!r}")
    if not 0 <= value <= MAX_LIMIT:
        raise InvalidArgument(f"{what} must be between 0 and {MAX_LIMIT}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Budget:
    """One action's budget. ``sum`` names the argument counted; ``limit`` the most a window
    may hold; ``per`` whose spending is counted; ``window`` the tumbling window's length (one
    second or more, whole seconds); ``over`` what a call past the limit meets. Raises
    ``InvalidArgument`` for any field out of shape."""

    sum: str
    limit: int
    per: BudgetScope = BudgetScope.SHARED
    window: timedelta = timedelta(days=1)
    over: OverBudget = OverBudget.DENY

    def __post_init__(self) -> None:
        if not isinstance(self.sum, str) or not self.sum.isidentifier():
            raise InvalidArgument(f"budget sum must name an argument, got {self.sum!r}")
        check_amount(self.limit, "budget limit")
        object.__setattr__(self, "per", _enum(BudgetScope, self.per, "budget per"))
        object.__setattr__(self, "over", _enum(OverBudget, self.over, "budget over"))
        seconds = self.window.total_seconds() if isinstance(self.window, timedelta) else 0
        if seconds < 1 or seconds != int(seconds):
            raise InvalidArgument(f"budget window must be whole seconds, 1s or more: {self.window}")

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> Budget:
        """A budget from its policy mapping (``sum`` and ``limit`` required, closed keys)."""
        unknown = sorted(set(body) - set(BUDGET_KEYS))
        if unknown:
            raise InvalidArgument(f"unknown budget key {unknown[0]!r}; expected {BUDGET_KEYS}")
        for key in ("sum", "limit"):
            if key not in body:
                raise InvalidArgument(f"budget needs {key!r}")
        return cls(
            sum=body["sum"],
            limit=body["limit"],
            per=body.get("per", BudgetScope.SHARED.value),
            window=parse_duration(body.get("window", "1d")),
            over=body.get("over", OverBudget.DENY.value),
        )

    def to_document(self) -> dict[str, Any]:
        """The budget as policy data (every field, so the policy hash covers all of them)."""
        return {
            "sum": self.sum,
            "limit": self.limit,
            "per": self.per.value,
            "window": render_duration(self.window),
            "over": self.over.value,
        }

    def budget_id(self, action: str, agent: str) -> str:
        """The row key: one per action, and per principal agent when ``per: agent``."""
        if self.per is BudgetScope.AGENT:
            return f"{action}:agent:{agent}"
        return f"{action}:shared"

    def window_start(self, now: datetime) -> datetime:
        """The start of the tumbling window holding ``now``: epoch-aligned, so a call exactly
        at a boundary is the first of the new window."""
        length = int(self.window.total_seconds())
        elapsed = int((now - _EPOCH).total_seconds() // 1)
        return _EPOCH + timedelta(seconds=elapsed - elapsed % length)

    def amount(self, arguments: Mapping[str, Any], action_id: str | None = None) -> int:
        """The amount this call spends; ``ActionDenied(budget_unevaluable)`` when the argument
        is missing or not a whole number from 0 (nothing is consumed for such a call)."""
        if self.sum not in arguments:
            raise ActionDenied(
                f"budget argument {self.sum!r} is missing",
                reason=DenyReason.BUDGET_UNEVALUABLE,
                action_id=action_id,
            )
        try:
            return check_amount(arguments[self.sum], f"budget argument {self.sum!r}")
        except InvalidArgument as error:
            raise ActionDenied(
                error.message, reason=DenyReason.BUDGET_UNEVALUABLE, action_id=action_id
            ) from None

    def verdict(self, spent: int, amount: int) -> BudgetVerdict:
        """What a call spending ``amount`` meets when the window already holds ``spent``."""
        if spent + amount <= self.limit:
            return BudgetVerdict.FITS
        return BudgetVerdict.DENY if self.over is OverBudget.DENY else BudgetVerdict.APPROVE


def _enum(kind: type[_E], value: object, what: str) -> _E:
    choices = [member.value for member in kind]
    if not isinstance(value, str) or value not in choices:
        raise InvalidArgument(f"{what} must be one of {', '.join(choices)}, got {value!r}")
    return kind(value)


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A budget as a call found and left it, from the store's row (never agent text): shown on
    receipts, ``inspect`` and approval requests."""

    budget_id: str
    window_start: datetime
    window: timedelta
    limit: int
    spent_before: int
    amount: int

    @property
    def spent_after(self) -> int:
        return self.spent_before + self.amount

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_id": self.budget_id,
            "window_start": self.window_start.isoformat(),
            "window": render_duration(self.window),
            "limit": self.limit,
            "spent_before": self.spent_before,
            "amount": self.amount,
            "spent_after": self.spent_after,
        }

    def describe(self) -> str:
        """One line for a person: ``spent 400 of 500 in the 1d window from …; this call 200``."""
        return (
            f"budget {self.budget_id}: spent {self.spent_before} of {self.limit} in the "
            f"{render_duration(self.window)} window from {display_instant(self.window_start)};"
            f" this call {self.amount} (after: {self.spent_after})"
        )


@dataclass(frozen=True, slots=True)
class BudgetCharge:
    """What a budgeted call asks its reservation transaction to consume: ``amount`` against
    ``budget_id``'s current window; ``force`` when a person approved going past the limit."""

    budget: Budget
    budget_id: str
    amount: int
    force: bool = False


def over_budget(state: BudgetState, action_id: str | None = None) -> ActionDenied:
    """The refusal of a call that would take its budget past the limit (``over: deny``)."""
    return ActionDenied(
        f"over budget: {state.describe()}",
        reason=DenyReason.OVER_BUDGET,
        action_id=action_id,
    )
