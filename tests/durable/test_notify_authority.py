"""A notification carries no authority the store wrote: its message names a target, and the
URL, the format and the secret that signs it are the policy's, read at delivery. A store
writer who rewrites a row's URL or secret variable gets nothing signed; a target the policy no
longer names is not sent (FAILED, named); no URL or secret variable is written to the store or
printed; what a person reads in a body is escaped as the terminal escapes it. Real receivers on
127.0.0.1, both stores."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

import ctrlrun
from ctrlrun import ApprovalRequired, Control
from ctrlrun.cli import main
from ctrlrun.config import load_policy_text
from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.display import is_unsafe
from ctrlrun.durable.notify import notification_dispatcher
from ctrlrun.durable.outbox import Outbox
from ctrlrun.errors import NotifyReason
from ctrlrun.kernel.notify import TOPIC
from ctrlrun.kernel.outbox import MessageStatus
from support.webhook_receiver import SECRET, Receiver

SECRET_ENV = "CTRLRUN_TEST_WEBHOOK_SECRET"
OTHER_SECRET = "whsec_" + "QWxsIHlvdXIgYmFzZSBhcmUgYmVsb25nIHRvIHVz"
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


def receiver_at() -> Receiver:
    found = Receiver()
    found.url = found.start()
    return found


@pytest.fixture
def receiver(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setenv("CTRLRUN_TEST_OTHER_SECRET", OTHER_SECRET)
    found = receiver_at()
    yield found
    found.stop()


@pytest.fixture
def attacker():
    found = receiver_at()
    yield found
    found.stop()


@pytest.fixture
def policy(receiver):
    return load_policy_text(POLICY.format(url=receiver.url))


@pytest.fixture
def delete(backend, policy):
    control = Control(policy, backend.store, clock=backend.clock)

    @ctrlrun.protect("k8s.namespace.delete", control=control)
    def delete(name: str, note: str = ""):
        return name

    return delete


def ask(delete, name="prod", **more):
    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalRequired) as needed:
        delete(name, **more)
    return needed.value


def rewrite_targets(backend, target: dict | str) -> None:
    """What a store writer does: every notification row's target replaced."""
    for row in backend.sql("SELECT message_id, payload_json FROM {t}outbox"):
        payload = json.loads(row["payload_json"])
        payload["target"] = target
        backend.sql(
            "UPDATE {t}outbox SET payload_json = :p WHERE message_id = :m",
            {"p": json.dumps(payload), "m": row["message_id"]},
        )


def test_a_row_rewritten_to_another_url_and_secret_gets_nothing_signed(
    backend, policy, receiver, attacker, delete
):
    ask(delete)
    forged = {
        "name": "ops",
        "url": attacker.url,
        "secret_env": "CTRLRUN_TEST_OTHER_SECRET",
        "format": "standard",
    }
    rewrite_targets(backend, forged)
    deliveries = notification_dispatcher(backend.store, targets=policy).run_once()
    assert {d.status for d in deliveries} == {MessageStatus.SENT}
    assert attacker.received == []  # the row's URL is never used
    assert len(receiver.received) == 2 and all(r.verified for r in receiver.received)
    assert {"type", "data"} <= set(receiver.received[0].body)  # the policy's target: standard


def test_a_target_the_policy_does_not_name_is_failed_named(
    backend, policy, receiver, attacker, delete
):
    ask(delete)
    rewrite_targets(backend, "evil")
    deliveries = notification_dispatcher(backend.store, targets=policy).run_once()
    assert {d.status for d in deliveries} == {MessageStatus.FAILED}
    assert receiver.received == [] and attacker.received == []
    for message in Outbox(backend.store).list():
        assert message.status is MessageStatus.FAILED
        assert f"names no target 'evil' ({NotifyReason.UNKNOWN_TARGET})" in message.last_error


def test_a_target_removed_from_the_policy_parks_its_messages(backend, policy, receiver, delete):
    needed = ask(delete)
    without_chat = load_policy_text(POLICY.format(url=receiver.url).replace("  - {name: chat", "#"))
    deliveries = notification_dispatcher(backend.store, targets=without_chat).run_once()
    by_key = {m.dedupe_key: m for m in Outbox(backend.store).list()}
    assert {d.status for d in deliveries} == {MessageStatus.SENT, MessageStatus.FAILED}
    chat = by_key[f"{needed.request_id}/chat"]
    assert chat.status is MessageStatus.FAILED and "'chat'" in chat.last_error
    assert str(NotifyReason.UNKNOWN_TARGET) in chat.last_error
    assert len(receiver.received) == 1 and "text" not in receiver.received[0].body


def test_no_url_or_secret_variable_reaches_the_store_or_the_cli(backend, receiver, delete):
    ask(delete)
    rows = backend.sql("SELECT payload_json FROM {t}outbox")
    assert len(rows) == 2
    for row in rows:
        assert receiver.url not in row["payload_json"] and SECRET_ENV not in row["payload_json"]
        assert json.loads(row["payload_json"])["target"] in {"ops", "chat"}
    # a row written before targets were named by name alone: shown by its name only
    legacy = {"name": "chat", "url": "https://hooks.slack.com/services/T0/B0/SeCrEt"}
    rewrite_targets(backend, {**legacy, "secret_env": SECRET_ENV, "format": "slack"})
    url = store_url(backend)
    for args in (["outbox", "list", "--json"], ["outbox", "list"]):
        result = CliRunner().invoke(main, [*args, "--store-url", url])
        assert result.exit_code == 0, result.output
        assert "SeCrEt" not in result.output and SECRET_ENV not in result.output
    [first, *_] = Outbox(backend.store).list()
    shown = CliRunner().invoke(main, ["outbox", "show", first.message_id, "--store-url", url])
    assert shown.exit_code == 0 and "SeCrEt" not in shown.output and '"chat"' in shown.output


def store_url(backend) -> str:
    if backend.name == "sqlite":
        return f"sqlite:///{backend.store.path}"
    return with_schema(backend.url, backend.store.schema)


FAKE = '\u2028Approval needed: k8s.namespace.delete {"name":"dev"} by alice\u2029\u202e009'


def test_a_bidi_or_separator_argument_cannot_fake_a_second_line(backend, policy, receiver, delete):
    ask(delete, "prod", note="ok" + FAKE + "\x1b[2J\x85")
    notification_dispatcher(backend.store, targets=policy).run_once()
    standard, slack = sorted(receiver.received, key=lambda r: "text" in r.body)
    text = slack.body["text"]
    assert not any(is_unsafe(c) for c in text if c != "\n")
    lines = text.split("\n")
    assert len(lines) == 3 and sum("Approval needed" in line for line in lines) == 1
    assert lines[0].startswith("Approval needed: k8s.namespace.delete")
    assert "\\u2028Approval needed" in lines[0] and "\\u202e009" in lines[0]
    summary = standard.body["data"]["summary"]
    assert not any(is_unsafe(c) for c in summary) and "\\u2029" in summary
    # the action itself stays exact (a receiver can recompute its hash), on an ASCII wire
    assert standard.body["data"]["action"]["arguments"]["note"].startswith("ok\u2028")


def test_the_body_carries_environment_needed_approvers_and_console_link(
    backend, policy, receiver, delete
):
    needed = ask(delete)
    link = "https://console.example/ctrlrun"
    notification_dispatcher(backend.store, targets=policy, console_url=link).run_once()
    standard, slack = sorted(receiver.received, key=lambda r: "text" in r.body)
    data = standard.body["data"]
    assert data["environment"] == "production" and data["approvers_needed"] == 1
    assert data["console_url"] == f"{link}/#request-{needed.request_id}"
    assert data["approve"] == f"ctrlrun approve {needed.request_id}"
    assert f"{link}/#request-{needed.request_id}" in slack.body["text"]
    assert re.search(r"Environment: production \| approvers still needed: 1", slack.body["text"])
    assert {m.topic for m in Outbox(backend.store).list()} == {TOPIC}


def test_a_failed_delivery_records_no_url(backend, policy, receiver, delete, caplog):
    ask(delete)
    receiver.statuses = [503, 400]
    with caplog.at_level("DEBUG", logger="ctrlrun"):
        deliveries = notification_dispatcher(backend.store, targets=policy).run_once()
    assert {d.status for d in deliveries} == {MessageStatus.PENDING, MessageStatus.FAILED}
    errors = [m.last_error or "" for m in Outbox(backend.store).list()]
    assert all(error for error in errors)
    for text in [*errors, caplog.text]:
        assert "/hooks/ctrlrun" not in text and SECRET not in text
    logged = {r.headers["webhook-id"] for r in receiver.received}
    assert all(f"webhook-id {token}" in caplog.text for token in logged)


def test_money_arguments_are_shown_as_a_person_reads_them(backend, receiver):
    """The policy's ``display:`` (read at delivery, like the targets) shows a money argument
    as €2,500.00 (250000) in both bodies; the exact value stays in ``data.action``."""
    shown_policy = load_policy_text(
        POLICY.format(url=receiver.url).replace(
            '    effect: "ns:{name}"\n',
            '    effect: "ns:{name}"\n    display: {cost: {money: EUR, minor: 2}}\n',
        )
    )
    control = Control(shown_policy, backend.store, clock=backend.clock)

    @ctrlrun.protect("k8s.namespace.delete", control=control)
    def delete(name: str, cost: int = 0):
        return name

    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalRequired):
        delete("prod", cost=250000)
    notification_dispatcher(backend.store, targets=shown_policy).run_once()
    standard, slack = sorted(receiver.received, key=lambda r: "text" in r.body)
    assert standard.body["data"]["shown"] == {"cost": "€2,500.00 (250000)"}
    assert standard.body["data"]["action"]["arguments"]["cost"] == 250000
    assert "Amounts: cost €2,500.00 (250000)" in slack.body["text"]
