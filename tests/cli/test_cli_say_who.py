"""Say who and why, the same way everywhere (issue 27): every command where a person answers
(`resolve`, `approve`, `deny`, `outbox resolve`, `plans approve`/`reject`) takes `--as NAME`
(env `$CTRLRUN_AS`, the old names still read) and `--reason TEXT`; who and why are recorded and
shown by `inspect`, `--json` and the listings, on both stores, through the real CLI."""

from __future__ import annotations

import json

import pytest

from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.durable import Dispatcher, MessageStatus, Outbox, Plans
from ctrlrun.kernel.event import EventType
from ctrlrun.postgres import PostgresStateStore
from support.cli import Scene, run

STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=STORES)
def scene(request, project, monkeypatch):
    """Real protected calls on a real SQLite file or a real Postgres schema, and the CLI
    pointed at the same store."""
    if request.param == "sqlite":
        (project / ".ctrlrun").mkdir()
        built = Scene(project)
    else:
        pg = request.getfixturevalue("pg_schema")
        built = Scene(
            project,
            opener=lambda clock: PostgresStateStore(pg.url, schema=pg.schema, clock=clock),
            url=with_schema(pg.url, pg.schema),
        )
    monkeypatch.setenv("CTRLRUN_STORE_URL", built.url)
    for name in ("CTRLRUN_AS", "CTRLRUN_APPROVER", "CTRLRUN_USER"):
        monkeypatch.delenv(name, raising=False)
    yield built
    built.close()


def events_of(scene, kind: EventType):
    return [e for e in scene.store.events() if e.type is kind]


def test_resolve_records_who_and_why_and_inspect_shows_them(scene):
    action_id = scene.ambiguous("pay_2")
    done = run(
        "resolve", "refund:pay_2", "--committed", "--as", "dana", "--reason", "Stripe shows re_9"
    )
    assert done.exit_code == 0, done.output
    assert "resolved committed by dana: Stripe shows re_9" in done.output
    (event,) = events_of(scene, EventType.EFFECT_RESOLVED)
    assert event.data["resolver"] == "dana" and event.data["reason"] == "Stripe shows re_9"
    assert scene.store.get_effect("refund:pay_2").resolved_by == "dana"
    shown = run("inspect", action_id)
    assert "resolved by dana: Stripe shows re_9" in shown.output
    document = json.loads(run("inspect", action_id, "--json").output)
    assert document["effect"]["resolved_by"] == "dana"
    assert document["effect"]["resolve_reason"] == "Stripe shows re_9"


def test_resolve_reads_ctrlrun_as_and_defaults_to_cli_local(scene, monkeypatch):
    scene.ambiguous("pay_2")
    scene.ambiguous("pay_4")
    monkeypatch.setenv("CTRLRUN_AS", "erin")
    assert run("resolve", "refund:pay_2", "--failed").exit_code == 0
    monkeypatch.delenv("CTRLRUN_AS")
    assert run("resolve", "refund:pay_4", "--failed").exit_code == 0
    resolvers = [e.data["resolver"] for e in events_of(scene, EventType.EFFECT_RESOLVED)]
    assert resolvers == ["erin", "cli:local"]
    assert "reason" not in events_of(scene, EventType.EFFECT_RESOLVED)[0].data


def test_approve_takes_a_reason_recorded_on_the_grant_and_shown(scene):
    approval_id = scene.pending("pay_3")
    granted = run("approve", approval_id, "--as", "frank", "--reason", "customer called")
    assert granted.exit_code == 0, granted.output
    assert "reason: customer called" in granted.output
    (event,) = events_of(scene, EventType.APPROVAL_GRANTED)
    assert event.data == {"approver": "frank", "reason": "customer called"}
    listed = [json.loads(line) for line in run("approvals", "--json").output.splitlines()]
    assert listed[0]["answers"] == [
        {"answer": "granted", "by": "frank", "reason": "customer called"}
    ]
    shown = run("inspect", approval_id)
    assert "granted by frank: customer called" in shown.output
    document = json.loads(run("inspect", approval_id, "--json").output)
    assert document["approvals"][0]["answers"][0]["reason"] == "customer called"


def test_ctrlrun_as_names_the_approver_and_the_old_variable_still_works(scene, monkeypatch):
    first, second = scene.pending("pay_3"), scene.pending("pay_5")
    monkeypatch.setenv("CTRLRUN_APPROVER", "old-name")
    assert run("deny", first, "--reason", "no").exit_code == 0
    monkeypatch.setenv("CTRLRUN_AS", "new-name")  # the new name wins over the old one
    assert run("approve", second).exit_code == 0
    assert scene.store.get_approval(first).approver == "old-name"
    assert scene.store.get_approval(second).approver == "new-name"


def test_an_empty_reason_is_refused_and_nothing_is_written(scene):
    scene.ambiguous("pay_2")
    before = len(scene.store.events())
    result = run("resolve", "refund:pay_2", "--failed", "--reason", "  ")
    assert result.exit_code == 1 and result.stderr.startswith("Error: a reason must be")
    assert len(scene.store.events()) == before
    assert str(scene.store.get_effect("refund:pay_2").state) == "ambiguous"


def _parked(store) -> str:
    message_id = Outbox(store).enqueue("pay", {"amount": 5})

    def lost(message):
        raise TimeoutError("no reply")

    (delivery,) = Dispatcher(store, lost, on_unknown={"pay": "park"}).run_once()
    assert delivery.status is MessageStatus.AMBIGUOUS
    return message_id


def test_outbox_resolve_takes_as_and_reason_and_keeps_by(scene, monkeypatch):
    first, second = _parked(scene.store), _parked(scene.store)
    done = run("outbox", "resolve", first, "--sent", "--as", "gina", "--reason", "in the log")
    assert done.exit_code == 0, done.output
    assert (
        Outbox(scene.store)
        .get(first)
        .last_error.startswith("resolved sent by gina: in the log (was: ")
    )
    monkeypatch.setenv("CTRLRUN_AS", "hal")
    assert run("outbox", "resolve", second, "--failed").exit_code == 0
    assert "by hal" in Outbox(scene.store).get(second).last_error
    shown = json.loads(run("outbox", "show", first, "--json").output)
    assert "gina: in the log" in shown["last_error"]


def test_plans_reject_takes_as_like_every_other_answer(scene, monkeypatch):
    plans = Plans(scene.store)
    steps = [{"action": "invoice.send", "arguments": {"to": "a@example.com"}}]
    first = plans.propose(steps, agent="planner")
    second = plans.propose(steps, agent="planner")
    assert run("plans", "reject", first.plan_id, "--as", "ivy").exit_code == 0
    assert run("plans", "reject", second.plan_id, "--by", "jo").exit_code == 0  # the old flag
    assert plans.get(first.plan_id).approver == "ivy"
    assert plans.get(second.plan_id).approver == "jo"


def test_plans_approve_and_reject_record_why_and_show_it(scene):
    plans = Plans(scene.store)
    steps = [{"action": "invoice.send", "arguments": {"to": "a@example.com"}}]
    first = plans.propose(steps, agent="planner")
    second = plans.propose(steps, agent="planner")
    approved = run("plans", "approve", first.plan_id, "--as", "kim", "--reason", "looked right")
    assert approved.exit_code == 0, approved.output
    assert approved.output.endswith("by kim: looked right\n")
    rejected = run("plans", "reject", second.plan_id, "--reason", "wrong customer")
    assert rejected.exit_code == 0 and rejected.output.endswith(": wrong customer\n")
    assert plans.get(first.plan_id).answer_reason == "looked right"
    assert plans.get(second.plan_id).answer_reason == "wrong customer"
    assert "reason   looked right" in run("plans", "show", first.plan_id).output
    shown = json.loads(run("plans", "show", second.plan_id, "--json").output)
    assert shown["answer_reason"] == "wrong customer"
