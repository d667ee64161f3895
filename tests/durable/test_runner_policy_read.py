"""The durable runner builds and decides each external step under one read of the policy
file, as ``protect`` does (issue 26), on both stores: an edit made since the last read applies
to the whole step (its effect key and its decision), and a refusal under it, an unloadable
file included, stays a FAILED step: nothing ran."""

from __future__ import annotations

import os

import pytest
from durable_steps import make_steps

import ctrlrun
from ctrlrun.durable import PlanRunner, Plans, PlanStatus, StepResult

EMAIL = {"action": "email.send", "arguments": {"to": "ops@example.com", "body": "reserved"}}

BEFORE = """\
schema: ctrlrun.policy/v1
actions:
  email.send:
    decision: allow
    effect: "mail-a:{to}"
"""

AFTER = BEFORE.replace("mail-a", "mail-b")
DENY = BEFORE.replace("decision: allow", "decision: deny")
BROKEN = BEFORE + "  broken: [\n"


def edit(path, text):
    before = os.stat(path).st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


class EditsBeforeStep(ctrlrun.Control):
    """Rewrites the policy file just before the step reads it (after ``run`` checked the
    plan's approval under the old one): the step must be built and decided under the new
    one, never built under the old and decided under the new."""

    path = None
    text = ""
    reads = 0

    def refresh_policy(self):
        self.reads += 1
        if self.path is not None and self.reads == 2:  # 1: run's approval check; 2: the step
            edit(self.path, self.text)
            self.path = None
        return super().refresh_policy()


@pytest.fixture
def run_email(backend, tmp_path, monkeypatch):
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(BEFORE)
    control = EditsBeforeStep.from_file(str(path), store=backend.store, clock=backend.clock)
    calls = tmp_path / "calls"
    calls.mkdir()

    def run(text):
        plans = Plans(backend.store)
        plan = plans.propose([EMAIL], agent="planner", user="alice")
        plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bob")
        control.path, control.text, control.reads = path, text, 0
        outcome = PlanRunner(backend.store, make_steps(str(calls)), control=control)
        return outcome.run(plan.plan_id), sorted(os.listdir(calls))

    return control, run


def test_the_edit_applies_to_the_whole_step(run_email, backend):
    control, run = run_email
    outcome, sent = run(AFTER)
    [step] = outcome.receipts
    assert step.result is StepResult.OK and step.effect_key == "mail-b:ops@example.com"
    assert sent == ["email-ops@example.com"]
    [receipt] = [r for r in backend.store.receipts() if r["result"] == "committed"]
    assert receipt["policy_hash"] == control.policy.policy_hash
    assert receipt["effect_key"] == "mail-b:ops@example.com"


@pytest.mark.parametrize("text", [DENY, BROKEN], ids=["denied", "unloadable"])
def test_a_refusal_under_the_new_read_is_a_failed_step(run_email, backend, text):
    _control, run = run_email
    outcome, sent = run(text)
    [step] = outcome.receipts
    assert step.result is StepResult.FAILED and sent == []
    assert outcome.plan.status is PlanStatus.FAILED
    assert backend.store.get_effect("mail-a:ops@example.com") is None
