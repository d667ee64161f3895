"""``ctrlrun check MODULE…``: imports the modules and reports every protected function the
policy does not fit; exit 1 on any finding, 0 when all fit."""

from __future__ import annotations

import json
import sys

import pytest

from support.cli import refused, run

TOOLS = """\
import ctrlrun


@ctrlrun.protect("stripe.refund")
def refund(payment_id: str, amount: int):
    return amount


@ctrlrun.protect("crm.write")
def write(customer: str):
    return customer


class Cluster:
    @ctrlrun.protect("k8s.namespace.delete", exclude=("client",))
    def delete(self, client: object, namespace: str):
        return namespace


@ctrlrun.protect("iam.grant_admin")
def grant(user: str):
    return user
"""

FITTING = """\
import ctrlrun


@ctrlrun.protect("stripe.refund")
async def refund(payment_id: str, amount: int):
    return amount
"""


@pytest.fixture
def modules(project, request):
    """Two module files with names unique to the test (they stay in sys.modules)."""
    stem = f"m{abs(hash(request.node.nodeid))}"
    (project / f"{stem}_tools.py").write_text(TOOLS)
    (project / f"{stem}_fit.py").write_text(FITTING)
    yield f"{stem}_tools", f"{stem}_fit"
    for name in (f"{stem}_tools", f"{stem}_fit"):
        sys.modules.pop(name, None)


def test_every_misfit_is_reported_and_the_exit_is_1(modules):
    tools, _ = modules
    result = run("check", tools)
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["FUNCTION", "ACTION", "FINDING", "DETAIL"]
    assert [line.split()[:3] for line in lines[1:]] == [
        [f"{tools}:write", "crm.write", "unknown_action"],
        [f"{tools}:Cluster.delete", "k8s.namespace.delete", "missing_parameter"],
        [f"{tools}:grant", "iam.grant_admin", "always_denied"],
    ]
    assert result.stderr == (
        "Error: 3 finding(s) in 3 of 4 protected function(s): the policy does not fit them\n"
    )
    assert "'ns-delete:{name}' names 'name'" in lines[2]


def test_json_gives_one_line_per_finding(modules):
    tools, _ = modules
    result = run("check", "--json", tools)
    assert result.exit_code == 1
    found = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(f["action"], f["kind"]) for f in found] == [
        ("crm.write", "unknown_action"),
        ("k8s.namespace.delete", "missing_parameter"),
        ("iam.grant_admin", "always_denied"),
    ]


def test_modules_that_fit_exit_0(modules):
    _, fit = modules
    result = run("check", fit)
    assert result.exit_code == 0, result.output
    assert result.stdout == "ok: 1 protected function(s) fit the policy ctrlrun.yaml\n"


def test_an_import_failure_is_one_line(project):
    refused(run("check", "no_such_module_here"), "cannot import no_such_module_here")


def test_a_module_without_protected_functions_is_refused(project):
    refused(run("check", "json"), "no protected function found in json")


def test_no_policy_is_refused(empty):
    refused(run("check", "json"), "no policy file")
