"""A notification rewritten in the outbox (the database itself, both stores) so its action
no longer hashes to the request's ``action_hash``: the dispatcher sends a body that says
tampered and shows no action, in the standard and the Slack format alike."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, Control
from ctrlrun.config import load_policy_text
from ctrlrun.durable.notify import notification_dispatcher
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


def test_a_rewritten_notification_is_sent_as_tampered(backend, receiver):
    policy = load_policy_text(POLICY.format(url=receiver.url))
    control = Control(policy, backend.store, clock=backend.clock)

    @ctrlrun.protect("k8s.namespace.delete", control=control)
    def delete(name: str) -> str:
        return name

    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalRequired) as needed:
        delete("prod")
    backend.sql(
        "UPDATE {t}outbox SET payload_json = replace(payload_json, :real, :shown)",
        {"real": '"arguments":{"name":"prod"}', "shown": '"arguments":{"name":"scratch"}'},
    )
    deliveries = notification_dispatcher(backend.store, targets=policy).run_once()
    assert {d.status for d in deliveries} == {MessageStatus.SENT}
    standard, slack = sorted(receiver.received, key=lambda r: "text" in r.body)
    assert standard.body["type"] == "approval.tampered"
    data = standard.body["data"]
    assert data["approval_id"] == needed.value.request_id and "action" not in data
    assert data["action_hash"] == needed.value.action_hash
    assert data["recomputed_hash"] not in (None, needed.value.action_hash)
    assert "scratch" not in str(standard.body) and "scratch" not in slack.body["text"]
    assert slack.body["text"].startswith(f"TAMPERED approval request ({needed.value.request_id})")
