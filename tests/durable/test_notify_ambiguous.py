"""``notify: [{…, events: [ambiguous]}]``: a call whose outcome is unknown announces its new
AMBIGUOUS effect through the outbox, in the outcome's own transaction, to the targets told of
``ambiguous`` only, with what a person needs to ask the provider, the resolve commands
shell-quoted and a console link — and so does a lapsed lease a later call finds (the holder
died mid-call); ``ctrlrun notify`` prints the webhook-id the receiver sees.
Sync and async, both stores, a real receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

import ctrlrun
from ctrlrun import AmbiguousEffect, Control
from ctrlrun.cli import main
from ctrlrun.config import load_policy_text
from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.display import command_line
from ctrlrun.durable.notify import notification_dispatcher
from ctrlrun.durable.outbox import Outbox
from ctrlrun.kernel.effect import EffectState, idempotency_token_for
from ctrlrun.kernel.notify import AMBIGUOUS_TOPIC
from ctrlrun.kernel.outbox import MessageStatus
from ctrlrun.store.protocol import StartRequest
from support.webhook_receiver import SECRET, Receiver

POLICY = """\
schema: ctrlrun.policy/v1
notify:
  - {{name: oncall, url: "{url}", secret_env: CTRLRUN_TEST_WEBHOOK_SECRET, events: [ambiguous]}}
  - {{name: chat, url: "{url}", secret_env: CTRLRUN_TEST_WEBHOOK_SECRET, format: slack,
      events: [approval, ambiguous]}}
  - {{name: approvals-only, url: "{url}", secret_env: CTRLRUN_TEST_WEBHOOK_SECRET}}
actions:
  stripe.refund:
    decision: allow
    effect: "refund:{{payment_id}}"
"""
PAYMENT = "pay 1'; rm -rf ~"  # a key a shell would split and run, unless quoted
KEY = f"refund:{PAYMENT}"
CONSOLE = "https://console.example"


class LostReply(Exception):
    """The provider may have refunded: the reply never came."""


@pytest.fixture
def receiver(monkeypatch):
    monkeypatch.setenv("CTRLRUN_TEST_WEBHOOK_SECRET", SECRET)
    found = Receiver()
    found.url = found.start()
    yield found
    found.stop()


@pytest.fixture
def policy_text(receiver):
    return POLICY.format(url=receiver.url)


@pytest.fixture
def control(backend, policy_text):
    return Control(load_policy_text(policy_text), backend.store, clock=backend.clock)


def refund_sync(control):
    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        raise LostReply("read timed out")

    with ctrlrun.context("support-bot", "alice"), pytest.raises(LostReply):
        refund(PAYMENT, 250000)


def refund_async(control):
    @ctrlrun.protect("stripe.refund", control=control)
    async def refund(payment_id: str, amount: int):
        raise LostReply("read timed out")

    async def call():
        with ctrlrun.context("support-bot", "alice"):
            await refund(PAYMENT, 250000)

    with pytest.raises(LostReply):
        asyncio.run(call())


@pytest.mark.parametrize("run", [refund_sync, refund_async], ids=["sync", "async"])
def test_a_new_ambiguous_effect_is_announced(backend, control, receiver, policy_text, run):
    run(control)
    assert backend.store.get_effect(KEY).state is EffectState.AMBIGUOUS
    messages = Outbox(backend.store).list()
    assert sorted(m.dedupe_key for m in messages) == [f"{KEY}/1/chat", f"{KEY}/1/oncall"]
    assert {m.topic for m in messages} == {AMBIGUOUS_TOPIC}
    targets = load_policy_text(policy_text)
    deliveries = notification_dispatcher(
        backend.store, targets=targets, console_url=CONSOLE
    ).run_once()
    assert {d.status for d in deliveries} == {MessageStatus.SENT}
    standard, slack = sorted(receiver.received, key=lambda r: "text" in r.body)
    assert standard.verified and slack.verified
    data = standard.body["data"]
    assert standard.body["type"] == "effect.ambiguous"
    assert data["effect_key"] == KEY and data["attempt"] == 1
    assert data["idempotency_token"] == idempotency_token_for(KEY, 1)
    assert data["environment"] == "production" and "LostReply" in data["error"]
    assert data["action"]["arguments"] == {"payment_id": PAYMENT, "amount": 250000}
    assert data["action"]["principal"] == {"agent": "support-bot", "user": "alice"}
    committed = command_line("ctrlrun", "resolve", KEY, "--committed")
    assert data["resolve"] == {
        "committed": committed,
        "failed": command_line("ctrlrun", "resolve", KEY, "--failed"),
    }
    assert "'\"'\"'" in committed  # the quote in the key is quoted, the ; stays inside
    link = f"{CONSOLE}/effect?key={quote(KEY, safe='')}"
    assert data["console_url"] == link
    text = slack.body["text"].replace("&amp;", "&")
    assert text.startswith("Outcome unknown (AMBIGUOUS): stripe.refund")
    assert committed in text and f"Console: {link}" in text
    assert idempotency_token_for(KEY, 1) in text


def test_no_ambiguous_target_no_message_and_a_committed_call_none(backend, receiver):
    text = POLICY.format(url=receiver.url).replace(", events: [ambiguous]", "")
    text = text.replace("events: [approval, ambiguous]", "events: [approval]")
    control = Control(load_policy_text(text), backend.store, clock=backend.clock)
    refund_sync(control)
    assert backend.store.get_effect(KEY).state is EffectState.AMBIGUOUS
    assert Outbox(backend.store).list() == ()


def store_url(backend) -> str:
    if backend.name == "sqlite":
        return f"sqlite:///{backend.store.path}"
    return with_schema(backend.url, backend.store.schema)


def test_the_cli_prints_the_webhook_id_the_receiver_sees(
    backend, control, receiver, policy_text, tmp_path: Path, monkeypatch
):
    refund_sync(control)
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(policy_text)
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))
    args = ["notify", "--once", "--store-url", store_url(backend), "--console-url", CONSOLE]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    printed = sorted(line.split("webhook-id ")[1].split()[0] for line in result.output.splitlines())
    assert printed == sorted(r.headers["webhook-id"] for r in receiver.received)
    assert len(printed) == 2 and receiver.url not in result.output


def hold_and_lapse(backend) -> None:
    """A process that reserved the key and died mid-call: its lease lapses, nothing recorded."""
    held = StartRequest(action_id="act_holder", effect_key=KEY, lease=timedelta(seconds=30))
    backend.store.start_action(held)
    backend.pass_time(timedelta(minutes=1))


def retry_sync(control):
    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        raise AssertionError("a lapsed key must not run again")

    with ctrlrun.context("support-bot"), pytest.raises(AmbiguousEffect):
        refund(PAYMENT, 250000)


def retry_async(control):
    @ctrlrun.protect("stripe.refund", control=control)
    async def refund(payment_id: str, amount: int):
        raise AssertionError("a lapsed key must not run again")

    async def call():
        with ctrlrun.context("support-bot"):
            await refund(PAYMENT, 250000)

    with pytest.raises(AmbiguousEffect):
        asyncio.run(call())


@pytest.mark.parametrize("run", [retry_sync, retry_async], ids=["sync", "async"])
def test_a_lapsed_lease_found_ambiguous_is_announced(backend, control, receiver, policy_text, run):
    hold_and_lapse(backend)
    run(control)
    assert backend.store.get_effect(KEY).state is EffectState.AMBIGUOUS
    messages = Outbox(backend.store).list()
    assert sorted(m.dedupe_key for m in messages) == [f"{KEY}/1/chat", f"{KEY}/1/oncall"]
    notification_dispatcher(backend.store, targets=load_policy_text(policy_text)).run_once()
    standard, slack = sorted(receiver.received, key=lambda r: "text" in r.body)
    data = standard.body["data"]
    assert standard.body["type"] == "effect.ambiguous" and data["action_id"] == "act_holder"
    assert data["attempt"] == 1 and "lapsed" in data["summary"] and "lease" in data["error"]
    assert data["resolve"]["failed"] == command_line("ctrlrun", "resolve", KEY, "--failed")
    assert data["idempotency_token"] == idempotency_token_for(KEY, 1)
    assert "lapsed before its outcome was recorded" in slack.body["text"]
