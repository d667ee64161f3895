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
