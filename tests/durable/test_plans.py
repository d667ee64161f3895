"""Approved plans on a real SQLite file and the real test Postgres (``backend``), external
steps through ``Control`` included; SIGKILL mid-step and four racing processes on SQLite
(eight racing processes on Postgres: ``test_races_postgres.py``)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from datetime import timedelta

import pytest
from durable_steps import INVENTORY_SQLITE, make_steps
from durable_workers import run_plan_then_hang

from ctrlrun import Control, EffectState
from ctrlrun.config import load_policy_text
from ctrlrun.durable import PlanRunner, Plans, PlanStatus, StepResult
from ctrlrun.errors import ClaimLost, NotExecuted, PlanReason, PlanRefused, StoreError
from support.policies import POLICY

RESERVE = {"action": "inventory.reserve", "arguments": {"item": "widget", "qty": 2}}
EMAIL = {"action": "email.send", "arguments": {"to": "ops@example.com", "body": "reserved"}}


@pytest.fixture
def calls(tmp_path):
    folder = tmp_path / "calls"
    folder.mkdir()
    return folder


@pytest.fixture
def inventory(backend):
    if backend.name == "sqlite":
        backend.sql(INVENTORY_SQLITE)
    else:
        backend.sql("CREATE TABLE {t}inventory (item text PRIMARY KEY, qty integer)")
    return backend


def steps_for(backend, calls, **kwargs):
    return make_steps(str(calls), **kwargs)


def approved(store, *steps, ttl=timedelta(hours=1)):
    plans = Plans(store)
    plan = plans.propose(list(steps), agent="planner", user="alice", ttl=ttl)
    return plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bob")


def inventory_rows(backend):
    return backend.sql("SELECT item, qty FROM {t}inventory ORDER BY item")


def marks(calls, prefix=""):
    return sorted(name for name in os.listdir(calls) if name.startswith(prefix))


class TestApproval:
    def test_the_approval_binds_to_the_hash(self, backend):
        plans = Plans(backend.store)
        plan = plans.propose([RESERVE], agent="planner")
        other = plans.propose(
            [{**RESERVE, "arguments": {"item": "widget", "qty": 3}}], agent="planner"
        )
        assert plan.plan_hash != other.plan_hash
        with pytest.raises(PlanRefused) as caught:
            plans.approve(plan.plan_id, plan_hash=other.plan_hash, approver="bob")
        assert caught.value.reason is PlanReason.HASH_MISMATCH
        assert plans.get(plan.plan_id).status is PlanStatus.PENDING
        answered = plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bob")
        assert (answered.status, answered.approved_hash) == (PlanStatus.APPROVED, plan.plan_hash)
        with pytest.raises(PlanRefused) as again:
            plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="eve")
        assert again.value.reason is PlanReason.NOT_PENDING

    def test_a_step_changed_after_approval_is_refused(self, inventory, calls):
        plan = approved(inventory.store, RESERVE)
        inventory.sql(
            "UPDATE {t}plans SET steps_json = replace(steps_json, '\"qty\":2',"
            " '\"qty\":200') WHERE plan_id = :id",
            {"id": plan.plan_id},
        )
        with pytest.raises(PlanRefused) as caught:
            PlanRunner(inventory.store, steps_for(inventory, calls)).run(plan.plan_id)
        assert caught.value.reason is PlanReason.TAMPERED
        assert inventory_rows(inventory) == [] and marks(calls) == []

    def test_a_step_changed_mid_run_never_runs_and_the_finish_refuses(self, inventory, calls):
        """The claim verified the stored steps against the approved hash; a later alteration
        cannot change what runs (each step runs from the claim's verified copy, and its
        receipt says so), and the finishing transaction re-checks: the plan is refused
        TAMPERED and never recorded executed; a resume is refused at its claim."""
        second = {"action": "inventory.reserve", "arguments": {"item": "gadget", "qty": 1}}
        plan = approved(inventory.store, RESERVE, second)
        runner = PlanRunner(inventory.store, steps_for(inventory, calls), worker="A")
        claimed = inventory.store.transact(runner._claim_in_txn(plan.plan_id))
        assert runner._run_step(claimed, 0).result is StepResult.OK
        inventory.sql(
            "UPDATE {t}plans SET steps_json = replace(steps_json, '\"qty\":1',"
            " '\"qty\":100') WHERE plan_id = :id",
            {"id": plan.plan_id},
        )
        assert runner._run_step(claimed, 1).output == {"reserved": 1}  # the approved step
        assert inventory_rows(inventory) == [
            {"item": "gadget", "qty": 1},
            {"item": "widget", "qty": 2},
        ]
        chained = [r.document for r in inventory.store.receipts()]
        assert [d["arguments"]["qty"] for d in chained] == [2, 1]
        assert {d["plan_hash"] for d in chained} == {plan.plan_hash}
        with pytest.raises(PlanRefused) as caught:
            runner._finish(claimed, PlanStatus.EXECUTED, None, [0, 1])
        assert caught.value.reason is PlanReason.TAMPERED
        assert Plans(inventory.store).get(plan.plan_id).status is PlanStatus.EXECUTING
        inventory.lapse("plans", "plan_id", plan.plan_id, "heartbeat_expires_at")
        with pytest.raises(PlanRefused) as again:
            PlanRunner(inventory.store, steps_for(inventory, calls)).run(plan.plan_id)
        assert again.value.reason is PlanReason.TAMPERED
        assert Plans(inventory.store).get(plan.plan_id).status is PlanStatus.APPROVED
        assert len(marks(calls, "db-")) == 2

    def test_a_step_changed_before_approval_cannot_be_approved(self, backend):
        plans = Plans(backend.store)
        plan = plans.propose([RESERVE], agent="planner")
        backend.sql(
            "UPDATE {t}plans SET steps_json = replace(steps_json, 'widget', 'gadget')"
            " WHERE plan_id = :id",
            {"id": plan.plan_id},
        )
        with pytest.raises(PlanRefused) as caught:
            plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bob")
        assert caught.value.reason is PlanReason.TAMPERED

    def test_approval_expires(self, backend):
        plans = Plans(backend.store)
        plan = plans.propose([RESERVE], agent="planner", ttl=timedelta(minutes=10))
        backend.lapse("plans", "plan_id", plan.plan_id, "expires_at")
        with pytest.raises(PlanRefused) as caught:
            plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bob")
        assert caught.value.reason is PlanReason.EXPIRED
        assert plans.get(plan.plan_id).status is PlanStatus.EXPIRED  # the kept write

    def test_an_approved_plan_not_started_in_time_expires(self, backend, calls):
        plan = approved(backend.store, RESERVE, ttl=timedelta(minutes=10))
        backend.lapse("plans", "plan_id", plan.plan_id, "expires_at")
        runner = PlanRunner(backend.store, steps_for(backend, calls))
        with pytest.raises(PlanRefused, match="expired"):
            runner.run(plan.plan_id)
        assert Plans(backend.store).get(plan.plan_id).status is PlanStatus.EXPIRED  # kept
        assert runner.run(plan.plan_id).ran == ()  # terminal: answered, nothing runs

    def test_a_rejected_plan_never_runs(self, backend, calls):
        plans = Plans(backend.store)
        plan = plans.propose([RESERVE], agent="planner")
        assert plans.reject(plan.plan_id, approver="bob").status is PlanStatus.REJECTED
        outcome = PlanRunner(backend.store, steps_for(backend, calls)).run(plan.plan_id)
        assert (outcome.plan.status, outcome.ran, outcome.receipts) == (PlanStatus.REJECTED, (), ())

    def test_a_pending_plan_is_not_run(self, backend, calls):
        plan = Plans(backend.store).propose([RESERVE], agent="planner")
        with pytest.raises(PlanRefused) as caught:
            PlanRunner(backend.store, steps_for(backend, calls)).run(plan.plan_id)
        assert caught.value.reason is PlanReason.NOT_APPROVED


class TestExecution:
    def test_steps_commit_with_their_receipts_and_a_repeat_answers_from_them(
        self, inventory, calls
    ):
        second = {"action": "inventory.reserve", "arguments": {"item": "gadget", "qty": 1}}
        plan = approved(inventory.store, RESERVE, second)
        runner = PlanRunner(inventory.store, steps_for(inventory, calls))
        outcome = runner.run(plan.plan_id)
        assert outcome.ok and outcome.ran == (0, 1)
        assert [(r.step_index, r.result) for r in outcome.receipts] == [
            (0, StepResult.OK),
            (1, StepResult.OK),
        ]
        assert outcome.receipts[0].output == {"reserved": 2}
        repeat = PlanRunner(inventory.fresh(), steps_for(inventory, calls)).run(plan.plan_id)
        assert repeat.ran == () and repeat.receipts == outcome.receipts
        assert inventory_rows(inventory) == [
            {"item": "gadget", "qty": 1},
            {"item": "widget", "qty": 2},
        ]
        assert len(marks(calls, "db-")) == 2

    def test_a_step_costs_the_same_in_a_long_plan(self, inventory, calls, monkeypatch):
        """Per run, the steps are hashed twice (claim, finish) and every receipt is read a
        bounded number of times, whatever the plan's length: no step's work grows with it."""
        import ctrlrun.durable.plans as plans_module
        import ctrlrun.durable.runner as runner_module
        import ctrlrun.kernel.plan as plan_module

        counts = {"hash": 0, "receipt": 0}

        def counting(name, fn):
            def wrapped(*args, **kwargs):
                counts[name] += 1
                return fn(*args, **kwargs)

            return wrapped

        monkeypatch.setattr(plan_module, "plan_hash", counting("hash", plan_module.plan_hash))
        decode = counting("receipt", plans_module.step_from_row)
        for module in (plans_module, runner_module):  # every decode of a step receipt row
            monkeypatch.setattr(module, "step_from_row", decode)
        seen = {}
        for length in (3, 30):
            folder = calls / str(length)  # each execution leaves a marker per position
            folder.mkdir()
            runner = PlanRunner(inventory.store, steps_for(inventory, folder))
            steps = [
                {"action": "inventory.reserve", "arguments": {"item": f"i{length}-{n}", "qty": n}}
                for n in range(length)
            ]
            plan = approved(inventory.store, *steps)
            counts.update(hash=0, receipt=0)
            assert runner.run(plan.plan_id).ok
            seen[length] = dict(counts)
        assert seen[3]["hash"] == seen[30]["hash"] == 2
        assert seen[30]["receipt"] - seen[3]["receipt"] == 2 * (30 - 3)  # per step: its own
        # write (RETURNING), and its row in the finish's list; the old runner read them all
        # per step

    def test_a_failing_database_step_rolls_back_and_stops_the_plan(self, inventory, calls):
        duplicate = RESERVE  # the same item twice: the second insert violates the primary key
        plan = approved(inventory.store, RESERVE, duplicate, RESERVE)
        outcome = PlanRunner(inventory.store, steps_for(inventory, calls)).run(plan.plan_id)
        assert outcome.plan.status is PlanStatus.FAILED and outcome.ran == (0, 1)
        assert [r.result for r in outcome.receipts] == [StepResult.OK, StepResult.FAILED]
        assert "step 1" in outcome.plan.error
        assert inventory_rows(inventory) == [{"item": "widget", "qty": 2}]  # step 0 stays

    def test_two_workers_race_the_claim_and_one_wins(self, inventory, calls):
        plan = approved(inventory.store, RESERVE)
        barrier, results = threading.Barrier(2), []

        def worker():
            runner = PlanRunner(inventory.fresh(), steps_for(inventory, calls))
            barrier.wait(timeout=30)
            try:
                results.append(runner.run(plan.plan_id).ran)
            except PlanRefused as exc:
                results.append(exc.reason)

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert (0,) in results and len(results) == 2
        assert results[1 - results.index((0,))] in ((), PlanReason.BUSY)
        assert len(marks(calls, "db-")) == 1

    def test_a_worker_whose_heartbeat_lapsed_is_fenced_out(self, inventory, calls):
        """A claims and is paused before its first step; its heartbeat lapses; a read heals the
        plan and B resumes and finishes it; A's step and finish then match no row."""
        plan = approved(inventory.store, RESERVE)
        a = PlanRunner(inventory.store, steps_for(inventory, calls), worker="A")
        claimed = inventory.store.transact(a._claim_in_txn(plan.plan_id))  # then: paused
        inventory.lapse("plans", "plan_id", plan.plan_id, "heartbeat_expires_at")
        healed = Plans(inventory.store).get(plan.plan_id)
        assert healed.status is PlanStatus.APPROVED and healed.interruptions == 1
        b = PlanRunner(inventory.fresh(), steps_for(inventory, calls), worker="B")
        assert b.run(plan.plan_id).ok
        with pytest.raises(ClaimLost) as caught:
            a._run_step(claimed, 0)
        assert (caught.value.kind, caught.value.claim) == ("plan", 1)
        with pytest.raises(ClaimLost):
            a._finish(claimed, PlanStatus.FAILED, "late", [])
        final = Plans(inventory.store).get(plan.plan_id)
        assert (final.status, final.claim_epoch, final.claimed_by) == (PlanStatus.EXECUTED, 2, "B")
        assert len(marks(calls, "db-")) == 1

    def test_a_resumed_plan_skips_steps_with_receipts(self, inventory, calls):
        second = {"action": "inventory.reserve", "arguments": {"item": "gadget", "qty": 1}}
        plan = approved(inventory.store, RESERVE, second)
        a = PlanRunner(inventory.store, steps_for(inventory, calls), worker="A")
        claimed = inventory.store.transact(a._claim_in_txn(plan.plan_id))
        written = a._run_step(claimed, 0)  # step 0 committed, then A died
        assert Plans(inventory.store).receipts(plan.plan_id) == (written,)  # as read back
        inventory.lapse("plans", "plan_id", plan.plan_id, "heartbeat_expires_at")
        resumed = PlanRunner(inventory.store, steps_for(inventory, calls), worker="B")
        outcome = resumed.run(plan.plan_id)
        assert outcome.ok and outcome.ran == (1,)
        assert [r.claim_epoch for r in outcome.receipts] == [1, 2]
        assert len(marks(calls, "db-0")) == 1 and len(marks(calls, "db-1")) == 1


class TestExternalSteps:
    @pytest.fixture
    def control(self, inventory):
        """``Control`` on the backend's store: the test's clock on SQLite; on Postgres the
        store's leases follow the server's clock (the control's clock stamps receipts)."""
        return Control(load_policy_text(POLICY), inventory.store, clock=inventory.clock)

    def test_an_external_step_goes_through_the_effect_kernel(self, inventory, control, calls):
        plan = approved(inventory.store, RESERVE, EMAIL)
        runner = PlanRunner(inventory.store, make_steps(str(calls)), control=control)
        outcome = runner.run(plan.plan_id)
        assert outcome.ok and outcome.receipts[1].effect_key == f"plan:{plan.plan_id}:1"
        effect = inventory.store.get_effect(f"plan:{plan.plan_id}:1")
        assert effect.state is EffectState.COMMITTED
        report = inventory.store.verify_chain()
        assert report.ok and report.total == 3  # two step receipts + the action's receipt
        assert runner.run(plan.plan_id).ran == () and marks(calls, "email-") == [
            "email-ops@example.com"
        ]

    def test_a_position_with_a_receipt_is_never_run_again_under_the_same_claim(
        self, inventory, control, calls
    ):
        """The run skips what its claim-time read found; a direct second attempt at a position
        that has a receipt is still answered: an external step by its receipt (no call), a
        database step by the receipt's primary key (its writes roll back)."""
        plan = approved(inventory.store, EMAIL, RESERVE)
        runner = PlanRunner(inventory.store, make_steps(str(calls)), control=control)
        claimed = inventory.store.transact(runner._claim_in_txn(plan.plan_id))
        first = runner._run_step(claimed, 0)
        assert runner._run_step(claimed, 0) == first
        assert marks(calls, "email-") == ["email-ops@example.com"]
        runner._run_step(claimed, 1)
        with pytest.raises(StoreError, match="plan_steps"):  # the receipt's primary key
            runner._run_step(claimed, 1)
        assert inventory_rows(inventory) == [{"item": "widget", "qty": 2}]
        assert [r.step_index for r in Plans(inventory.store).receipts(plan.plan_id)] == [0, 1]
        assert runner._finish(claimed, PlanStatus.EXECUTED, None, [0, 1]).ok

    def test_an_unknown_outcome_is_ambiguous_and_stops_the_plan(self, inventory, control, calls):
        plan = approved(inventory.store, EMAIL, RESERVE)
        steps = make_steps(str(calls), fail_email=TimeoutError("no reply"))
        outcome = PlanRunner(inventory.store, steps, control=control).run(plan.plan_id)
        assert outcome.plan.status is PlanStatus.FAILED
        assert [r.result for r in outcome.receipts] == [StepResult.AMBIGUOUS]
        assert inventory.store.get_effect(f"plan:{plan.plan_id}:0").state is (EffectState.AMBIGUOUS)
        assert inventory_rows(inventory) == []

    def test_not_executed_is_a_failed_step(self, inventory, control, calls):
        plan = approved(inventory.store, EMAIL)
        steps = make_steps(str(calls), fail_email=NotExecuted("smtp down"))
        outcome = PlanRunner(inventory.store, steps, control=control).run(plan.plan_id)
        assert [r.result for r in outcome.receipts] == [StepResult.FAILED]
        assert "smtp down" in outcome.receipts[0].error

    def test_a_paused_external_step_is_fenced_after_a_heal(self, inventory, control, calls):
        """A is paused inside the external call; its heartbeat lapses (its effect lease does
        not); B heals and resumes: the effect key is held, so B records the step AMBIGUOUS
        (never calls again); A's late receipt is refused by the fence."""
        plan = approved(inventory.store, EMAIL)
        inside, release, results = threading.Event(), threading.Event(), {}
        steps = make_steps(str(calls))
        send = steps.get("email.send").fn

        def paused_send(**arguments):
            value = send(**arguments)
            inside.set()
            assert release.wait(timeout=30)  # the explicit pause point
            return value

        from ctrlrun.durable.runner import StepHandler, StepKind

        steps._handlers["email.send"] = StepHandler(StepKind.EXTERNAL, paused_send)
        a = PlanRunner(inventory.store, steps, control=control, worker="A")

        def run_a():
            try:
                results["a"] = a.run(plan.plan_id)
            except ClaimLost as exc:
                results["a"] = exc

        thread = threading.Thread(target=run_a)
        thread.start()
        assert inside.wait(timeout=30)
        if inventory.name == "sqlite":
            inventory.clock.advance(timedelta(minutes=3))  # past the 120 s heartbeat only
        else:
            inventory.lapse("plans", "plan_id", plan.plan_id, "heartbeat_expires_at")
        other = inventory.fresh()
        b_control = Control(load_policy_text(POLICY), other, clock=inventory.clock)
        outcome = PlanRunner(other, make_steps(str(calls)), control=b_control, worker="B").run(
            plan.plan_id
        )
        assert [r.result for r in outcome.receipts] == [StepResult.AMBIGUOUS]
        release.set()
        thread.join(timeout=30)
        assert isinstance(results["a"], ClaimLost)
        assert marks(calls, "email-") == ["email-ops@example.com"]
        assert Plans(inventory.store).get(plan.plan_id).status is PlanStatus.FAILED
        other.close()


@pytest.mark.slow
@pytest.mark.parametrize("hang_in", ["db", "external"])
def test_kill_9_mid_step(inventory, tmp_path, calls, hang_in):
    """SIGKILL inside a step. A database step's transaction never committed: the resume runs
    it again and it commits once. An external step's effect key is left executing: after its
    lease the resume finds it AMBIGUOUS and never calls it again."""
    backend = inventory
    store = backend.store
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    first = RESERVE if hang_in == "db" else EMAIL
    plan = approved(
        store, first, {"action": "inventory.reserve", "arguments": {"item": "gadget", "qty": 1}}
    )
    ctx = mp.get_context("spawn")
    inside = ctx.Event()
    child = ctx.Process(
        target=run_plan_then_hang,
        args=(backend.spec, str(policy), str(calls), plan.plan_id, inside, hang_in),
    )
    child.start()
    assert inside.wait(timeout=60)
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    assert Plans(store).get(plan.plan_id).status is PlanStatus.EXECUTING  # heartbeat live
    backend.pass_time(timedelta(minutes=10))  # past the heartbeat and the effect lease
    assert Plans(store).get(plan.plan_id).status is PlanStatus.APPROVED  # healed on read
    control = Control(load_policy_text(POLICY), store, clock=backend.clock)
    outcome = PlanRunner(store, make_steps(str(calls)), control=control).run(plan.plan_id)
    if hang_in == "db":
        assert outcome.ok and outcome.ran == (0, 1)
        assert inventory_rows(backend) == [
            {"item": "gadget", "qty": 1},
            {"item": "widget", "qty": 2},
        ]
        assert len(marks(calls, "db-0")) == 2  # ran twice, committed once
    else:
        assert outcome.plan.status is PlanStatus.FAILED and outcome.ran == (0,)
        assert [r.result for r in outcome.receipts] == [StepResult.AMBIGUOUS]
        assert marks(calls, "email-") == ["email-ops@example.com"]  # never called again
        assert inventory_rows(backend) == []
    assert store.verify_chain().ok


@pytest.mark.slow
def test_four_processes_race_one_plan(sqlite_backend, calls):
    from durable_workers import race_plan_run

    sqlite_backend.sql(INVENTORY_SQLITE)
    plan = approved(sqlite_backend.store, RESERVE)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    args = (str(sqlite_backend.store.path), str(calls), plan.plan_id, barrier, results)
    workers = [ctx.Process(target=race_plan_run, args=args) for _ in range(4)]
    for worker in workers:
        worker.start()
    outcomes = [answer for _, answer in (results.get(timeout=60) for _ in workers)]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    assert outcomes.count([0]) == 1, outcomes
    assert all(answer in ([], "busy") for answer in outcomes if answer != [0]), outcomes
    assert len(marks(calls, "db-")) == 1
    assert inventory_rows(sqlite_backend) == [{"item": "widget", "qty": 2}]
