"""Approval notifications: each new request enqueues one outbox message per ``notify`` target
in its own transaction; the dispatcher POSTs it to a real receiver on 127.0.0.1, signed per
Standard Webhooks (verified there with the same library), once per request, again with the
same ``webhook-id`` after an unknown outcome, never after a refusal. Both stores."""

from __future__ import annotations

from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, Control
from ctrlrun.config import load_policy_text
from ctrlrun.durable.notify import notification_dispatcher
from ctrlrun.durable.outbox import Outbox
from ctrlrun.kernel.notify import TOPIC
from ctrlrun.kernel.outbox import MessageStatus
from support.webhook_receiver import SECRET, Receiver

POLICY = """\
schema: ctrlrun.policy/v1
notify:
  - {{name: ops, url: "{url}", secret_env: CTRLRUN_TEST_WEBHOOK_SECRET}}
  - {{name: chat, url: "{url}", secret_env: CTRLRUN_TEST_WEBHOOK_SECRET, format: slack}}
actions:
  k8s.namespace.delete:
    decision: approve
    effect: "ns:{{name}}"
"""


@pytest.fixture
def receiver(monkeypatch):
    monkeypatch.setenv("CTRLRUN_TEST_WEBHOOK_SECRET", SECRET)
    found = Receiver()
    found.url = found.start()
    yield found
    found.stop()


@pytest.fixture
def policy(receiver):
    return load_policy_text(POLICY.format(url=receiver.url))


@pytest.fixture
def control(backend, policy):
    return Control(policy, backend.store, clock=backend.clock)


@pytest.fixture
def delete(control):
    @ctrlrun.protect("k8s.namespace.delete", control=control)
    def delete(name: str):
        return name

    return delete


def ask(delete, name="prod"):
    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalRequired) as needed:
        delete(name)
    return needed.value


def test_a_request_is_delivered_signed_once_per_target(backend, policy, receiver, delete):
    needed = ask(delete)
    assert ask(delete).request_id == needed.request_id  # a retry notifies nobody again
    messages = Outbox(backend.store).list()
    assert sorted(m.dedupe_key for m in messages) == [
        f"{needed.request_id}/chat",
        f"{needed.request_id}/ops",
    ]
    dispatcher = notification_dispatcher(backend.store, targets=policy)
    deliveries = dispatcher.run_once()
    assert {d.status for d in deliveries} == {MessageStatus.SENT}
    assert dispatcher.run_once() == ()
    assert len(receiver.received) == 2 and all(r.verified for r in receiver.received)
    standard, slack = sorted(receiver.received, key=lambda r: "text" in r.body)
    data = standard.body["data"]
    assert standard.body["type"] == "approval.requested"
    assert data["approval_id"] == needed.request_id and data["summary"] == needed.summary
    assert data["action"]["arguments"] == {"name": "prod"}
    assert needed.request_id in slack.body["text"] and 'k8s.namespace.delete {"name":"prod"}' in (
        slack.body["text"].replace("&quot;", '"')
    )
    ids = {r.headers["webhook-id"] for r in receiver.received}
    assert ids == {m.token for m in messages}


def test_an_unknown_outcome_is_sent_again_with_the_same_id(backend, policy, receiver, delete):
    ask(delete)
    receiver.statuses = [503, 503]
    dispatcher = notification_dispatcher(backend.store, targets=policy)
    first = dispatcher.run_once()
    assert {d.status for d in first} == {MessageStatus.PENDING}
    backend.pass_time(timedelta(minutes=10))
    assert {d.status for d in dispatcher.run_once()} == {MessageStatus.SENT}
    by_id: dict[str, int] = {}
    for r in receiver.received:
        by_id[r.headers["webhook-id"]] = by_id.get(r.headers["webhook-id"], 0) + 1
    assert sorted(by_id.values()) == [2, 2]


def test_a_refusal_fails_the_message_without_retrying(backend, policy, receiver, delete):
    ask(delete)
    receiver.statuses = [400, 200]
    deliveries = notification_dispatcher(backend.store, targets=policy).run_once()
    assert sorted(d.status for d in deliveries) == [MessageStatus.FAILED, MessageStatus.SENT]


def test_a_missing_secret_sends_nothing_and_waits(backend, policy, receiver, delete, monkeypatch):
    ask(delete)
    monkeypatch.delenv("CTRLRUN_TEST_WEBHOOK_SECRET")
    deliveries = notification_dispatcher(backend.store, targets=policy).run_once()
    assert {d.status for d in deliveries} == {MessageStatus.PENDING} and receiver.received == []


def test_the_topic_is_the_notification_topic(backend, delete):
    ask(delete)
    assert {m.topic for m in Outbox(backend.store).list()} == {TOPIC}


BUDGETED = """\
schema: ctrlrun.policy/v1
notify:
  - {{name: ops, url: "{url}", secret_env: CTRLRUN_TEST_WEBHOOK_SECRET}}
  - {{name: chat, url: "{url}", secret_env: CTRLRUN_TEST_WEBHOOK_SECRET, format: slack}}
actions:
  pay:
    effect: "pay:{{ref}}"
    decision: allow
    budget: {{sum: amount, limit: 1000, per: agent, window: 3650d, over: approve}}
"""


def test_a_request_past_an_over_approve_budget_is_delivered_with_the_budget(backend, receiver):
    """The budget the store read with the request reaches both formats, checked against the
    action and the policy at delivery."""
    policy = load_policy_text(BUDGETED.format(url=receiver.url))
    control = Control(policy, backend.store, clock=backend.clock)

    @ctrlrun.protect("pay", control=control)
    def pay(ref: str, amount: int) -> str:
        return "paid"

    with ctrlrun.context("bot"):
        pay("r1", 900)
        with pytest.raises(ApprovalRequired):
            pay("r2", 200)
    deliveries = notification_dispatcher(backend.store, targets=policy).run_once()
    assert {d.status for d in deliveries} == {MessageStatus.SENT}
    standard, slack = sorted(receiver.received, key=lambda r: "text" in r.body)
    data = standard.body["data"]
    assert (data["budget"]["spent"], data["budget"]["limit"], data["budget"]["amount"]) == (
        900,
        1000,
        200,
    )
    assert data["budget_text"].startswith("budget pay:agent:bot (per agent): spent 900 of 1000")
    [line] = [x for x in slack.body["text"].split("\n") if x.startswith("Budget: ")]
    assert "this call 200 makes 1100, 100 over the limit" in line
