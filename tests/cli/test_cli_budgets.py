"""``ctrlrun check`` reports a budget summing an argument the protected function lacks (every
call would be refused as budget_unevaluable); one that fits passes."""

from __future__ import annotations

import sys

import pytest

from support.cli import run

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  pay:
    decision: allow
    budget: {sum: amount, limit: 1000}
"""

TOOLS = """\
import ctrlrun


@ctrlrun.protect("pay")
def pay(ref: str, cents: int):
    return cents
"""

FITTING = TOOLS.replace("cents", "amount")


@pytest.fixture
def modules(empty, request):
    stem = f"b{abs(hash(request.node.nodeid))}"
    (empty / "ctrlrun.yaml").write_text(POLICY)
    (empty / f"{stem}_tools.py").write_text(TOOLS)
    (empty / f"{stem}_fit.py").write_text(FITTING)
    yield f"{stem}_tools", f"{stem}_fit"
    for name in (f"{stem}_tools", f"{stem}_fit"):
        sys.modules.pop(name, None)


def test_a_budget_over_a_missing_argument_is_reported(modules):
    tools, _ = modules
    result = run("check", tools)
    assert result.exit_code == 1, result.output
    [finding] = result.stdout.splitlines()[1:]
    assert finding.split()[:3] == [f"{tools}:pay", "pay", "missing_parameter"]
    assert "the budget sums 'amount'" in finding


def test_a_fitting_budget_passes(modules):
    _, fit = modules
    result = run("check", fit)
    assert result.exit_code == 0, result.output


def test_stats_show_spend_and_over_budget_refusals(empty):
    """``ctrlrun stats`` lists each budget's spend per window and counts over_budget."""
    import json

    import ctrlrun
    from ctrlrun import ActionDenied, Control, SQLiteStateStore
    from ctrlrun.config import load_policy_text

    store = SQLiteStateStore(empty / "state.db")
    control = Control(load_policy_text(POLICY), store)

    @ctrlrun.protect("pay", control=control)
    def pay(ref: str, amount: int) -> str:
        return "paid"

    with ctrlrun.context("bot"):
        pay("r1", 800)
        with pytest.raises(ActionDenied):
            pay("r2", 300)
    store.close()
    url = f"sqlite:///{empty / 'state.db'}"
    report = json.loads(run("stats", "--json", "--store-url", url).stdout)
    [budget] = report["budgets"]
    assert (budget["budget_id"], budget["spent"]) == ("pay:shared", 800)
    assert "over_budget" in json.dumps(report)
    shown = run("stats", "--store-url", url).stdout
    assert "pay:shared: 800 spent in the window from" in shown


APPROVE = POLICY.replace(
    "budget: {sum: amount, limit: 1000}",
    "budget: {sum: amount, limit: 1000, per: agent, over: approve}",
)


def _asked_past_the_limit(empty) -> tuple[str, str]:
    """A call past an ``over: approve`` limit (800 spent, 300 asked): its request and store."""
    import ctrlrun
    from ctrlrun import ApprovalRequired, Control, SQLiteStateStore
    from ctrlrun.config import load_policy_text

    (empty / "ctrlrun.yaml").write_text(APPROVE)
    store = SQLiteStateStore(empty / "state.db")
    control = Control(load_policy_text(APPROVE), store)

    @ctrlrun.protect("pay", control=control)
    def pay(ref: str, amount: int) -> str:
        return "paid"

    with ctrlrun.context("bot"):
        pay("r1", 800)
        with pytest.raises(ApprovalRequired) as needed:
            pay("r2", 300)
    store.close()
    return needed.value.request_id, f"sqlite:///{empty / 'state.db'}"


def test_approvals_show_the_budget_of_a_request_past_the_limit(empty):
    """``ctrlrun approvals`` adds a BUDGET column: what the store held when the person was
    asked, and what the window holds now; ``--json`` the same fields."""
    import json

    request_id, url = _asked_past_the_limit(empty)
    shown = run("approvals", "--store-url", url)
    assert shown.exit_code == 0, shown.output
    header, row = shown.stdout.splitlines()
    assert header.split()[-1] == "BUDGET"
    assert row.startswith(request_id)
    assert "budget pay:agent:bot (per agent): spent 800 of 1000 in the 1d window" in row
    assert "this call 300 makes 1100, 100 over the limit (now: spent 800 of 1000" in row
    [document] = [
        json.loads(line)
        for line in run("approvals", "--json", "--store-url", url).stdout.splitlines()
    ]
    assert (document["budget"]["spent"], document["budget"]["limit"]) == (800, 1000)
    assert document["budget_text"].startswith("budget pay:agent:bot (per agent)")
    assert document["budget_now"]["spent_before"] == 800


def test_a_rewritten_budget_on_the_request_is_not_shown(empty):
    """Facts rewritten behind ctrlrun's back (a higher limit than the policy's) are shown as
    the mismatch, never as the budget."""
    import json
    import sqlite3

    _, url = _asked_past_the_limit(empty)
    db = sqlite3.connect(empty / "state.db")
    with db:
        ((event_id, data),) = db.execute(
            "SELECT event_id, data_json FROM events WHERE type = 'APPROVAL_REQUESTED'"
        ).fetchall()
        forged = json.loads(data)
        forged["budget"]["limit"] = 100000
        db.execute(
            "UPDATE events SET data_json = ? WHERE event_id = ?", (json.dumps(forged), event_id)
        )
    db.close()
    row = run("approvals", "--store-url", url).stdout.splitlines()[1]
    assert "budget facts NOT shown: the policy's budget is not the one recorded" in row
    assert "spent 800 of 100000" not in row
