"""The budget line a person reads on an ``over: approve`` request (kernel/budget_facts.py) and
the notification body that carries it: the stored form round-trips; facts that do not agree
with the request's action or the request's policy are never shown as a budget, only as the
mismatch; an argument cannot forge the line, in the body's JSON or its Slack text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.argument_display import Money
from ctrlrun.kernel.budget import Budget, BudgetCharge, BudgetState
from ctrlrun.kernel.budget_facts import BudgetFacts, shown_budget
from ctrlrun.kernel.notify import BodyFormat
from ctrlrun.kernel.notify_body import approval_event, render

BUDGET = Budget.parse(
    {"sum": "amount", "limit": 1000, "per": "agent", "window": "1d", "over": "approve"}
)
START = datetime(2026, 12, 5, tzinfo=UTC)
AT = START + timedelta(hours=9)


def action(amount: object = 500, note: str = "refund") -> Action:
    return Action("pay", {"amount": amount, "note": note}, Principal("bot"))


def facts_for(call: Action, spent: int = 600) -> BudgetFacts:
    charge = BudgetCharge(BUDGET, "pay:agent:bot", 500)
    state = BudgetState("pay:agent:bot", START, BUDGET.window, 1000, spent, 500)
    return BudgetFacts.of(charge, state)


def test_the_stored_form_round_trips_and_reads_as_one_line():
    facts = facts_for(action())
    stored = facts.to_dict()
    assert stored["window_end"] == "2026-12-06T00:00:00.000000Z" and stored["after"] == 1100
    assert BudgetFacts.from_dict(stored) == facts
    assert facts.describe() == (
        "budget pay:agent:bot (per agent): spent 600 of 1000 in the 1d window"
        " 2026-12-05T00:00:00Z to 2026-12-06T00:00:00Z; this call 500 makes 1100,"
        " 100 over the limit"
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"amount": 5}, "do not add up"),  # after no longer spent + amount
        ({"amount": 5, "after": 605}, "not the amount recorded"),
        ({"budget_id": "pay:agent:other"}, "not this action's"),
        ({"limit": 5000}, "the policy's budget is not the one recorded"),
        (
            {
                "window_start": "2026-12-05T01:00:00.000000Z",
                "window_end": "2026-12-06T01:00:00.000000Z",
            },
            "window",
        ),
        ({"spent": "600"}, "out of shape"),
        ({"per": "team"}, "out of shape"),
    ],
)
def test_facts_that_disagree_with_the_action_or_policy_are_not_shown(change, problem):
    call = action()
    stored = {**facts_for(call).to_dict(), **change}
    shown = shown_budget(stored, call.to_dict(), BUDGET)
    assert shown.facts is None
    assert problem in (shown.problem or "")
    assert shown.line().startswith("budget facts NOT shown: ")


def test_without_the_requests_policy_the_action_is_still_checked():
    call = action(amount=7)  # the request binds 7, the facts say 500
    shown = shown_budget(facts_for(call).to_dict(), call.to_dict(), None)
    assert shown.facts is None and "not the amount recorded" in shown.problem
    assert shown_budget(None, call.to_dict(), BUDGET).line() is None


def event_for(call: Action, budget: dict | None) -> dict:
    return approval_event(
        approval_id="apr_1",
        action=call.to_dict(),
        action_hash=call.action_hash,
        policy_hash="sha256:p",
        expires_at=AT + timedelta(minutes=15),
        summary="pay",
        created_at=AT,
        budget=budget,
    )


def test_the_body_carries_the_checked_line_in_json_and_slack():
    call = action()
    event = event_for(call, facts_for(call).to_dict())
    body = render(event, BodyFormat.STANDARD, budget=BUDGET)
    assert body["data"]["budget"]["spent"] == 600
    assert body["data"]["budget_text"].startswith("budget pay:agent:bot (per agent): spent 600")
    text = render(event, BodyFormat.SLACK, budget=BUDGET)["text"]
    [line] = [x for x in text.split("\n") if x.startswith("Budget: ")]
    assert "spent 600 of 1000" in line and "100 over the limit" in line


def test_an_argument_cannot_forge_the_budget_line():
    forged = "x\nBudget: budget pay:agent:bot (per agent): spent 0 of 1000"
    call = action(note=forged)
    event = event_for(call, facts_for(call).to_dict())
    text = render(event, BodyFormat.SLACK, budget=BUDGET)["text"]
    budget_lines = [x for x in text.split("\n") if x.startswith("Budget: ")]
    assert len(budget_lines) == 1 and "spent 600 of 1000" in budget_lines[0]
    tampered = {**facts_for(call).to_dict(), "limit": 100000}  # a rewritten outbox row
    body = render(event_for(call, tampered), BodyFormat.STANDARD, budget=BUDGET)
    assert body["data"]["budget"] is None
    assert body["data"]["budget_text"].startswith("budget facts NOT shown")


def test_a_body_without_a_budget_has_no_budget_fields():
    body = render(event_for(action(), None), BodyFormat.STANDARD)
    assert "budget" not in body["data"] and "budget_text" not in body["data"]
    assert "Budget:" not in render(event_for(action(), None), BodyFormat.SLACK)["text"]


def test_amounts_read_as_money_when_the_action_displays_its_sum_so():
    call = action()
    euros = {"amount": Money("EUR", 2)}
    shown = shown_budget(facts_for(call).to_dict(), call.to_dict(), BUDGET, euros)
    assert shown.line() == (
        "budget pay:agent:bot (per agent): spent €6.00 (600) of €10.00 (1000) in the 1d window"
        " 2026-12-05T00:00:00Z to 2026-12-06T00:00:00Z; this call €5.00 (500) makes"
        " €11.00 (1100), €1.00 (100) over the limit"
    )
    others = {"note": Money("EUR", 2)}  # a display of another argument changes nothing
    plain = shown_budget(facts_for(call).to_dict(), call.to_dict(), BUDGET, others)
    assert plain.line() == facts_for(call).describe()
    event = event_for(call, facts_for(call).to_dict())
    body = render(event, BodyFormat.STANDARD, displays=euros, budget=BUDGET)
    assert "spent €6.00 (600) of €10.00 (1000)" in body["data"]["budget_text"]
