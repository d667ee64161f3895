"""Eight OS processes race each durable claim on the real Postgres store, released together
by a barrier: exactly one delivers the message, runs the plan, starts the operation — the
others are refused or find the work done, and every external effect happened once."""

from __future__ import annotations

import os

import pytest

from ctrlrun.durable import (
    MessageStatus,
    Operations,
    OperationStatus,
    Outbox,
    Plans,
    PlanStatus,
)
from ctrlrun.postgres import PostgresStateStore
from support import pg_sql
from support.durable_race import race

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def store(pg_schema):
    opened = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)  # migrated once
    yield opened
    opened.close()


@pytest.fixture
def calls(tmp_path):
    folder = tmp_path / "calls"
    folder.mkdir()
    return folder


@pytest.mark.timeout(180)
def test_eight_processes_race_one_message_and_one_delivers(store, pg_schema, calls):
    message_id = Outbox(store).enqueue("t", {"n": 1})
    answers = race("outbox", pg_schema.url, pg_schema.schema, calls, message_id)
    assert sorted(map(len, answers)) == [0] * 7 + [1], answers
    assert os.listdir(calls) == [f"sent-{message_id}"]
    message = Outbox(store).get(message_id)
    assert (message.status, message.attempts) == (MessageStatus.SENT, 1)


@pytest.mark.timeout(180)
def test_eight_processes_race_one_plan_and_one_runs_it(store, pg_schema, calls):
    pg_sql.execute(
        pg_schema.url,
        pg_schema.schema,
        "CREATE TABLE {schema}.inventory (item text PRIMARY KEY, qty integer)",
    )
    plans = Plans(store)
    step = {"action": "inventory.reserve", "arguments": {"item": "widget", "qty": 2}}
    plan = plans.propose([step], agent="planner")
    plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bob")
    answers = race("plan", pg_schema.url, pg_schema.schema, calls, plan.plan_id)
    assert answers.count([0]) == 1, answers
    assert all(a in ([], "busy") for a in answers if a != [0]), answers
    assert len(os.listdir(calls)) == 1  # the step executed once, in the winner
    final = plans.get(plan.plan_id)
    assert (final.status, final.claim_epoch) == (PlanStatus.EXECUTED, 1)
    rows = pg_sql.execute(pg_schema.url, pg_schema.schema, "SELECT * FROM {schema}.inventory")
    assert rows == [{"item": "widget", "qty": 2}]
    assert store.verify_chain().ok and store.verify_chain().total == 1


@pytest.mark.timeout(180)
def test_eight_processes_race_one_start_and_it_is_issued_once(store, pg_schema, calls):
    operation = Operations(store).submit("branch.reset", "db:main")
    answers = race("operation", pg_schema.url, pg_schema.schema, calls, operation.operation_id)
    starters = [remote for remote, started in answers if started]
    assert len(starters) == 1, answers
    assert os.listdir(calls) == [f"start-{operation.operation_id}"]
    final = Operations(store).get(operation.operation_id)
    assert (final.status, final.remote_id) == (OperationStatus.RUNNING, starters[0])
    assert final.claim_epoch == 1
