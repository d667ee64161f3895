"""``ctrlrun plans`` and ``ctrlrun operations`` against a real store file."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctrlrun.cli import main
from ctrlrun.durable import Operations, Plans, PlanStatus
from ctrlrun.store.sqlite import SQLiteStateStore

STEP = {"action": "inventory.reserve", "arguments": {"item": "widget", "qty": 2}}


@pytest.fixture
def store(tmp_path):
    opened = SQLiteStateStore(tmp_path / "state.db")
    yield opened
    opened.close()


@pytest.fixture
def cli(store, monkeypatch):
    monkeypatch.setenv("CTRLRUN_STORE_URL", f"sqlite://{store.path}")
    monkeypatch.setenv("CTRLRUN_USER", "bob")
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args))


def test_list_show_and_approve_by_the_reviewed_hash(store, cli):
    plan = Plans(store).propose([STEP], agent="planner")
    listed = cli("plans", "list")
    assert listed.exit_code == 0 and plan.plan_id in listed.output and "pending" in listed.output
    shown = cli("plans", "show", plan.plan_id)
    assert shown.exit_code == 0 and plan.plan_hash in shown.output
    assert "inventory.reserve" in shown.output
    wrong = cli("plans", "approve", plan.plan_id, "--hash", "sha256:" + "0" * 64)
    assert wrong.exit_code == 1 and wrong.output.startswith("Error: ")
    assert wrong.output.count("\n") == 1
    ok = cli("plans", "approve", plan.plan_id, "--hash", plan.plan_hash)
    assert ok.exit_code == 0 and "approved" in ok.output and "by bob" in ok.output
    assert Plans(store).get(plan.plan_id).status is PlanStatus.APPROVED
    shown = cli("plans", "show", plan.plan_id, "--json").output
    assert shown.count("\n") == 1  # one document, one line
    data = json.loads(shown)
    assert data["approved_hash"] == plan.plan_hash and data["receipts"] == []


def test_reject_and_the_errors(store, cli):
    plan = Plans(store).propose([STEP], agent="planner")
    assert cli("plans", "reject", plan.plan_id, "--by", "carol").exit_code == 0
    assert Plans(store).get(plan.plan_id).status is PlanStatus.REJECTED
    again = cli("plans", "approve", plan.plan_id)
    assert again.exit_code == 1 and "already rejected" in again.output
    assert cli("plans", "show", "pln_missing").exit_code == 1
    assert cli("plans", "approve").exit_code == 2  # usage


def test_operations_list_and_reap(store, cli):
    operation = Operations(store).submit("branch.reset", "db:main")
    second = Operations(store).submit("branch.reset", "db:other")
    listed = cli("operations", "list", "--json")
    assert listed.exit_code == 0
    lines = listed.output.splitlines()  # one JSON document per line, like every --json listing
    assert [json.loads(line)["operation_id"] for line in lines] == [
        operation.operation_id,
        second.operation_id,
    ]
    assert cli("operations", "list", "--status", "failed", "--json").output == ""
    reaped = cli("operations", "reap")
    assert reaped.exit_code == 0 and "nothing to reap" in reaped.output


def test_a_missing_store_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CTRLRUN_STORE_URL", f"sqlite://{tmp_path / 'absent.db'}")
    result = CliRunner().invoke(main, ["plans", "list"])
    assert result.exit_code == 1 and result.output.startswith("Error: no ctrlrun store")
