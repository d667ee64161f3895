"""Plan approvals follow the action rules: with a policy naming approvers, the runner runs a
plan only if its approval is signed by one of them over the plan id, its hash and the
approver; with ``distinct_from_requester`` on a step's action, not one approved by its own
proposer. Checked before any step runs, on both stores."""

from __future__ import annotations

import pytest
from durable_steps import INVENTORY_SQLITE, make_steps

from ctrlrun import Control
from ctrlrun.config import load_policy_text
from ctrlrun.durable import PlanRunner, Plans, PlanStatus
from ctrlrun.errors import PlanReason, PlanRefused
from ctrlrun.kernel.signing import generate, plan_grant_message, sign

BOB_PEM, BOB_KEY = generate()
MALLORY_PEM, _ = generate()
RESERVE = {"action": "inventory.reserve", "arguments": {"item": "widget", "qty": 2}}

POLICY = f"""\
schema: ctrlrun.policy/v1
approvals: {{distinct_from_requester: true}}
approvers:
  bob: {{key: "{BOB_KEY}"}}
actions:
  inventory.reserve:
    decision: allow
"""


@pytest.fixture
def inventory(backend):
    if backend.name == "sqlite":
        backend.sql(INVENTORY_SQLITE)
    else:
        backend.sql("CREATE TABLE {t}inventory (item text PRIMARY KEY, qty integer)")
    return backend


@pytest.fixture
def runner(inventory, tmp_path):
    (tmp_path / "calls").mkdir()
    control = Control(load_policy_text(POLICY), inventory.store, clock=inventory.clock)
    return PlanRunner(inventory.store, make_steps(str(tmp_path / "calls")), control=control)


def propose_and_approve(store, approver, key=None):
    plans = Plans(store)
    plan = plans.propose([RESERVE], agent="planner", user="alice")
    message = plan_grant_message(plan_id=plan.plan_id, plan_hash=plan.plan_hash, approver=approver)
    signature = sign(key, message) if key is not None else None
    return plans.approve(
        plan.plan_id, plan_hash=plan.plan_hash, approver=approver, signature=signature
    )


def test_a_plan_signed_by_a_named_approver_runs(inventory, runner):
    plan = propose_and_approve(inventory.store, "bob", BOB_PEM)
    assert runner.run(plan.plan_id).plan.status is PlanStatus.EXECUTED


@pytest.mark.parametrize(
    ("approver", "key"), [("bob", None), ("bob", MALLORY_PEM), ("mallory", MALLORY_PEM)]
)
def test_an_unsigned_or_mis_signed_approval_runs_nothing(inventory, runner, approver, key):
    plan = propose_and_approve(inventory.store, approver, key)
    with pytest.raises(PlanRefused) as refused:
        runner.run(plan.plan_id)
    assert refused.value.reason is PlanReason.UNSIGNED
    assert inventory.sql("SELECT item FROM {t}inventory") == []
    assert Plans(inventory.store).get(plan.plan_id).status is PlanStatus.APPROVED


@pytest.mark.parametrize("proposer", ["alice", "Alice ", "\u0430lice"], ids=ascii)
def test_the_proposer_cannot_approve_its_own_plan(inventory, runner, proposer):
    # one identity however it is spelled: case, a trailing space, Cyrillic U+0430 (kernel.identity)
    plan = propose_and_approve(inventory.store, proposer)
    with pytest.raises(PlanRefused) as refused:
        runner.run(plan.plan_id)
    assert refused.value.reason is PlanReason.REQUESTER


def test_the_shell_signs_a_plan_approval_with_as_and_key(tmp_path):
    from ctrlrun.store.sqlite import SQLiteStateStore
    from support.cli import run

    store = SQLiteStateStore(tmp_path / "state.db")  # the real clock, as the CLI's
    store.transact(lambda txn: txn.connection.execute(INVENTORY_SQLITE))
    (tmp_path / "calls").mkdir()
    (tmp_path / "bob.pem").write_bytes(BOB_PEM)
    plan = Plans(store).propose([RESERVE], agent="planner", user="alice")
    key, url = str(tmp_path / "bob.pem"), f"sqlite:///{tmp_path / 'state.db'}"
    done = run("plans", "approve", plan.plan_id, "--as", "bob", "--key", key, "--store-url", url)
    assert done.exit_code == 0, done.output
    control = Control(load_policy_text(POLICY), store)
    runner = PlanRunner(store, make_steps(str(tmp_path / "calls")), control=control)
    try:
        assert runner.run(plan.plan_id).plan.status is PlanStatus.EXECUTED
    finally:
        store.close()
