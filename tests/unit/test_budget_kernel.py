"""The budget kernel (kernel/budget.py) and its policy syntax: spec checks, window arithmetic,
amounts, verdicts and the state shown to people."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ctrlrun import InvalidArgument, PolicyError
from ctrlrun.config import load_policy_text
from ctrlrun.errors import ActionDenied, DenyReason
from ctrlrun.kernel.budget import (
    MAX_LIMIT,
    Budget,
    BudgetScope,
    BudgetState,
    BudgetVerdict,
    OverBudget,
    check_amount,
    over_budget,
)
from ctrlrun.kernel.policy_model import ActionPolicy, Decision

DAY = timedelta(days=1)


def policy_text(budget: str) -> str:
    return (
        f"schema: ctrlrun.policy/v1\nactions:\n  pay:\n    decision: allow\n    budget: {budget}\n"
    )


class TestSpec:
    def test_defaults_are_shared_daily_deny(self) -> None:
        """Only ``sum`` and ``limit`` are required; the rest default to shared, 1d, deny."""
        budget = Budget.parse({"sum": "amount", "limit": 10})
        assert (budget.per, budget.window, budget.over) == (
            BudgetScope.SHARED,
            DAY,
            OverBudget.DENY,
        )

    def test_round_trips_through_its_document(self) -> None:
        """``to_document`` gives every field, and parsing it gives the same budget."""
        body = {"sum": "amount", "limit": 5, "per": "agent", "window": "1h", "over": "approve"}
        budget = Budget.parse(body)
        assert budget.to_document() == body
        assert Budget.parse(budget.to_document()) == budget

    @pytest.mark.parametrize(
        ("body", "says"),
        [
            ({"sum": "amount", "limit": 1, "colour": "red"}, "unknown budget key 'colour'"),
            ({"limit": 1}, "budget needs 'sum'"),
            ({"sum": "amount"}, "budget needs 'limit'"),
            ({"sum": "not an identifier", "limit": 1}, "must name an argument"),
            ({"sum": 7, "limit": 1}, "must name an argument"),
            ({"sum": "amount", "limit": 1.5}, "whole number"),
            ({"sum": "amount", "limit": True}, "whole number"),
            ({"sum": "amount", "limit": -1}, "between 0"),
            ({"sum": "amount", "limit": MAX_LIMIT + 1}, "between 0"),
            ({"sum": "amount", "limit": 1, "per": "team"}, "budget per must be one of"),
            ({"sum": "amount", "limit": 1, "over": "warn"}, "budget over must be one of"),
            ({"sum": "amount", "limit": 1, "window": "soon"}, "a duration"),
        ],
    )
    def test_bad_specs_are_typed_errors(self, body: dict[str, Any], says: str) -> None:
        """Every malformed field is an ``InvalidArgument`` naming what is wrong."""
        with pytest.raises(InvalidArgument, match=says):
            Budget.parse(body)

    @pytest.mark.parametrize("window", [timedelta(0), timedelta(milliseconds=1500), "1d"])
    def test_window_must_be_whole_seconds(self, window: Any) -> None:
        """A window under a second, with a fraction, or not a timedelta is refused."""
        with pytest.raises(InvalidArgument, match="whole seconds"):
            Budget(sum="amount", limit=1, window=window)

    def test_action_policy_refuses_a_non_budget(self) -> None:
        """``ActionPolicy.budget`` takes a parsed ``Budget`` only."""
        with pytest.raises(InvalidArgument, match="budget must be a Budget"):
            ActionPolicy("pay", decision=Decision.ALLOW, budget={"sum": "a"})  # type: ignore[arg-type]


class TestPolicyLoading:
    def test_loaded_policy_carries_the_budget_and_hashes_it(self) -> None:
        """The policy loads the budget; its document (what the policy hash covers) has it."""
        one = load_policy_text(policy_text("{sum: amount, limit: 500000, per: agent}"))
        two = load_policy_text(policy_text("{sum: amount, limit: 400000, per: agent}"))
        entry = one.entry("pay")
        assert entry is not None and entry.budget == Budget("amount", 500000, BudgetScope.AGENT)
        assert entry.to_document()["budget"]["limit"] == 500000
        assert one.policy_hash != two.policy_hash

    @pytest.mark.parametrize(
        ("budget", "key", "says"),
        [
            ("{sum: amount, limit: 1.5}", "actions.pay.budget.limit", "floats are refused"),
            ("{sum: amount, limit: true}", "actions.pay.budget", "whole number"),
            ("{sum: amount, limit: -3}", "actions.pay.budget", "between 0"),
            ("{sum: amount}", "actions.pay.budget.limit", "missing required key"),
            ("{sum: amount, limit: 1, cap: 2}", "actions.pay.budget.cap", "unknown key"),
            ("{sum: amount, limit: 1, per: team}", "actions.pay.budget", "budget per"),
            ("5", "actions.pay.budget", "must be a mapping"),
        ],
    )
    def test_bad_budget_refuses_the_policy_clearly(self, budget: str, key: str, says: str) -> None:
        """A bad budget makes the policy unloadable with a ``PolicyError`` at its key."""
        with pytest.raises(PolicyError, match=says) as caught:
            load_policy_text(policy_text(budget))
        assert caught.value.key == key


class TestWindows:
    @pytest.mark.parametrize(
        ("now", "start"),
        [
            (
                datetime(2026, 3, 4, 23, 59, 59, 999999, tzinfo=UTC),
                datetime(2026, 3, 4, tzinfo=UTC),
            ),
            (datetime(2026, 3, 5, tzinfo=UTC), datetime(2026, 3, 5, tzinfo=UTC)),
            (datetime(2026, 3, 5, 0, 0, 0, 1, tzinfo=UTC), datetime(2026, 3, 5, tzinfo=UTC)),
        ],
    )
    def test_daily_window_rolls_over_exactly_at_midnight_utc(
        self, now: datetime, start: datetime
    ) -> None:
        """The window is epoch-aligned: the boundary instant opens the new window."""
        assert Budget("amount", 1).window_start(now) == start

    def test_odd_windows_align_to_the_epoch(self) -> None:
        """A 7s window starts at a multiple of 7 seconds since the epoch."""
        budget = Budget("amount", 1, window=timedelta(seconds=7))
        now = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
        start = budget.window_start(now)
        assert int(start.timestamp()) % 7 == 0
        assert start <= now < start + timedelta(seconds=7)

    def test_budget_ids_per_agent_and_shared(self) -> None:
        """``per: agent`` keys by the principal agent; ``shared`` ignores it."""
        assert Budget("a", 1, BudgetScope.AGENT).budget_id("pay", "bot") == "pay:agent:bot"
        assert Budget("a", 1).budget_id("pay", "bot") == "pay:shared"


class TestAmounts:
    @pytest.mark.parametrize("value", [0, 1, MAX_LIMIT])
    def test_whole_numbers_are_amounts(self, value: int) -> None:
        assert Budget("amount", 1).amount({"amount": value}) == value

    @pytest.mark.parametrize("value", [1.0, True, -1, "5", None, MAX_LIMIT + 1])
    def test_other_values_deny_as_unevaluable(self, value: object) -> None:
        """Floats, bools, negatives, strings: ``ActionDenied(budget_unevaluable)``."""
        with pytest.raises(ActionDenied) as caught:
            Budget("amount", 1).amount({"amount": value}, action_id="act1")
        assert caught.value.reason is DenyReason.BUDGET_UNEVALUABLE
        assert caught.value.action_id == "act1"

    def test_missing_argument_denies_as_unevaluable(self) -> None:
        with pytest.raises(ActionDenied, match="'amount' is missing") as caught:
            Budget("amount", 1).amount({"other": 1})
        assert caught.value.reason is DenyReason.BUDGET_UNEVALUABLE

    def test_check_amount_names_what(self) -> None:
        with pytest.raises(InvalidArgument, match="limit must be a whole number"):
            check_amount(2.5, "limit")


class TestVerdicts:
    def test_exactly_at_the_limit_fits(self) -> None:
        assert Budget("a", 10).verdict(6, 4) is BudgetVerdict.FITS

    def test_past_the_limit_denies_or_asks(self) -> None:
        assert Budget("a", 10).verdict(6, 5) is BudgetVerdict.DENY
        assert Budget("a", 10, over=OverBudget.APPROVE).verdict(6, 5) is BudgetVerdict.APPROVE


class TestState:
    def test_state_shows_before_after_limit_window(self) -> None:
        """The state for receipts and approvers has spent before/after, limit and window."""
        start = datetime(2026, 3, 5, tzinfo=UTC)
        state = BudgetState("pay:shared", start, DAY, 500, 400, 200)
        assert state.spent_after == 600
        assert state.to_dict() == {
            "budget_id": "pay:shared",
            "window_start": "2026-03-05T00:00:00+00:00",
            "window": "1d",
            "limit": 500,
            "spent_before": 400,
            "amount": 200,
            "spent_after": 600,
        }
        text = state.describe()
        for part in ("spent 400 of 500", "1d window", "this call 200", "after: 600"):
            assert part in text

    def test_over_budget_is_a_typed_refusal(self) -> None:
        state = BudgetState("pay:shared", datetime(2026, 3, 5, tzinfo=UTC), DAY, 500, 400, 200)
        error = over_budget(state, action_id="act1")
        assert error.reason is DenyReason.OVER_BUDGET
        assert error.action_id == "act1"
        assert "spent 400 of 500" in error.message


class TestObservation:
    def test_budget_verdicts_become_would_have(self) -> None:
        """Read-only budget verdicts: deny → over_budget, approve → approval_required, fits →
        would have run; the earlier checks still come first."""
        from ctrlrun.kernel.observe import WouldHave, plan_observation

        now = datetime(2026, 3, 5, tzinfo=UTC)

        def seen(
            verdict: BudgetVerdict, decision: Decision = Decision.ALLOW, approved: bool = False
        ) -> object:
            return plan_observation(
                decision, "rule[0]", None, None, approved=approved, now=now, budget=(verdict, "s")
            ).would_have

        assert seen(BudgetVerdict.DENY) is WouldHave.OVER_BUDGET
        assert seen(BudgetVerdict.APPROVE) is WouldHave.APPROVAL_REQUIRED
        # a grant for exactly this call: enforcement charges it past an over: approve limit
        assert seen(BudgetVerdict.APPROVE, approved=True) is None
        assert seen(BudgetVerdict.APPROVE, Decision.APPROVE, approved=True) is None
        assert seen(BudgetVerdict.DENY, Decision.APPROVE, approved=True) is WouldHave.OVER_BUDGET
        assert seen(BudgetVerdict.FITS) is None
        assert seen(BudgetVerdict.DENY, Decision.APPROVE) is WouldHave.APPROVAL_REQUIRED
