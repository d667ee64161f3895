"""Notifications survive killed processes, on both stores: an agent killed right after its
request still gets the request delivered (it was enqueued in the request's transaction), and
a dispatcher killed mid-delivery leaves the message to be delivered again, with the same
``webhook-id``, once its claim lapses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctrlrun.config import load_policy_file
from ctrlrun.durable.notify import notification_dispatcher
from ctrlrun.durable.outbox import Outbox
from ctrlrun.kernel.outbox import MessageStatus
from support.webhook_receiver import SECRET, Receiver

pytestmark = pytest.mark.slow

POLICY = """\
schema: ctrlrun.policy/v1
notify:
  - {{name: ops, url: "{url}", secret_env: CTRLRUN_TEST_WEBHOOK_SECRET}}
actions:
  k8s.namespace.delete:
    decision: approve
    effect: "ns:{{name}}"
"""

AGENT = textwrap.dedent(
    """\
    import os, signal, sys
    import ctrlrun
    from ctrlrun.config import load_policy_file
    from ctrlrun.store import open_store

    control = ctrlrun.Control(load_policy_file(sys.argv[1]), open_store(sys.argv[2]))

    @ctrlrun.protect("k8s.namespace.delete", control=control)
    def delete(name: str):
        return name

    with ctrlrun.context("ops-bot"):
        try:
            delete("prod")
        except ctrlrun.ApprovalRequired as exc:
            print(exc.request_id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # right after the request committed
    """
)


def store_url(backend) -> str:
    if backend.name == "sqlite":
        return f"sqlite:///{backend.store.path}"
    separator = "&" if "?" in backend.url else "?"
    return f"{backend.url}{separator}ctrlrun_schema={backend.store.schema}"


@pytest.fixture
def receiver(monkeypatch):
    monkeypatch.setenv("CTRLRUN_TEST_WEBHOOK_SECRET", SECRET)
    found = Receiver()
    found.url = found.start()
    yield found
    found.stop()


@pytest.fixture
def policy(tmp_path, receiver) -> Path:
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(POLICY.format(url=receiver.url))
    return path


def catch_up(backend) -> None:
    """Children stamp SQLite rows with the real clock: move the test's clock past it (on
    Postgres every process shares the server's)."""
    if backend.name == "sqlite":
        behind = datetime.now(UTC) + timedelta(seconds=1) - backend.clock()
        backend.clock.advance(max(behind, timedelta(0)))


def agent_asks(tmp_path, policy, backend) -> str:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    done = subprocess.run(
        [sys.executable, str(script), str(policy), store_url(backend)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    catch_up(backend)
    return done.stdout.strip()


def test_an_agent_killed_right_after_its_request_still_gets_it_delivered(
    tmp_path, policy, backend, receiver
):
    approval_id = agent_asks(tmp_path, policy, backend)
    assert approval_id.startswith("apr_")
    [delivery] = notification_dispatcher(
        backend.fresh(), targets=load_policy_file(policy)
    ).run_once()
    assert delivery.status is MessageStatus.SENT
    [received] = receiver.received
    assert received.verified and received.body["data"]["approval_id"] == approval_id


def test_a_dispatcher_killed_mid_delivery_is_redelivered_with_the_same_id(
    tmp_path, policy, backend, receiver
):
    agent_asks(tmp_path, policy, backend)
    receiver.hold = threading.Event()
    env = {**os.environ, "CTRLRUN_TEST_WEBHOOK_SECRET": SECRET, "CTRLRUN_CONFIG": str(policy)}
    dispatcher = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("ctrlrun")),
            "notify",
            "--once",
            "--store-url",
            store_url(backend),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert receiver.arrived.wait(60), "the dispatcher never delivered"
        dispatcher.send_signal(signal.SIGKILL)  # mid-delivery: the receiver has not answered
        dispatcher.wait(30)
    finally:
        receiver.hold.set()
        if dispatcher.poll() is None:
            dispatcher.kill()
    catch_up(backend)
    [message] = Outbox(backend.store).list()
    assert message.status is MessageStatus.PROCESSING and message.attempts == 1
    backend.lapse("outbox", "message_id", message.message_id, "lease_expires_at")
    receiver.hold = None
    [delivery] = notification_dispatcher(
        backend.fresh(), targets=load_policy_file(policy)
    ).run_once()
    assert delivery.status is MessageStatus.SENT and delivery.attempts == 2
    first, second = receiver.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == message.token
    assert first.verified and second.verified
