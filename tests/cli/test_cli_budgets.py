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
