"""``ctrlrun init``: a starter policy that loads and says what the issue asks, and a store."""

from __future__ import annotations

import ctrlrun
from ctrlrun import Decision
from ctrlrun.cli.init import STARTER_POLICY
from ctrlrun.config import load_policy_file, load_policy_text
from support.cli import refused, run


def decide(policy, action_name, **arguments):
    action = ctrlrun.Action(action_name, arguments, ctrlrun.Principal("bot"))
    return policy.evaluate(action).decision


def test_init_writes_a_policy_that_loads_and_creates_the_store(empty):
    result = run("init")
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        "wrote ctrlrun.yaml: 5 actions; anything it does not name is denied",
        "created store .ctrlrun/state.db",
        'next: protect a function with @ctrlrun.protect("stripe.refund"), or run `ctrlrun demo`'
        " to watch the refusals",
    ]
    assert (empty / "ctrlrun.yaml").read_text() == STARTER_POLICY
    load_policy_file(empty / "ctrlrun.yaml")
    assert (empty / ".ctrlrun" / "state.db").is_file()
    assert run("receipts").stdout == "no receipts yet\n"


def test_the_starter_policy_says_what_it_promises():
    policy = load_policy_text(STARTER_POLICY)
    assert decide(policy, "crm.read", customer="c_1") is Decision.ALLOW
    assert decide(policy, "email.send", message_id="m_1") is Decision.ALLOW
    assert str(policy.entry("email.send").effect.source) == "email:{message_id}"
    bands = {
        -500: Decision.DENY,
        0: Decision.DENY,
        1: Decision.ALLOW,
        100_000: Decision.ALLOW,
        100_001: Decision.APPROVE,
        1_000_000: Decision.APPROVE,
        1_000_001: Decision.DENY,
    }
    for amount, decision in bands.items():
        assert decide(policy, "stripe.refund", payment_id="p", amount=amount) is decision, amount
    assert decide(policy, "k8s.namespace.delete", name="prod") is Decision.APPROVE
    assert policy.entry("k8s.namespace.delete").effect is not None
    assert decide(policy, "iam.grant_admin", user="mallory") is Decision.DENY
    assert decide(policy, "anything.else") is Decision.DENY
    assert sum(line.lstrip().startswith("#") for line in STARTER_POLICY.splitlines()) >= 8


def test_init_beside_an_existing_policy_creates_only_the_missing_store(empty):
    (empty / "ctrlrun.yaml").write_text("mine\n")
    result = run("init")
    assert result.exit_code == 0, result.output
    assert "kept ctrlrun.yaml as it is (init never overwrites a policy)" in result.stdout
    assert "created store .ctrlrun/state.db" in result.stdout
    assert (empty / "ctrlrun.yaml").read_text() == "mine\n"
    assert (empty / ".ctrlrun" / "state.db").is_file()
    again = run("init")
    assert "kept the existing store .ctrlrun/state.db" in again.stdout
    assert (empty / "ctrlrun.yaml").read_text() == "mine\n"


def test_init_refuses_a_policy_path_that_is_a_directory_and_writes_nothing(empty):
    (empty / "ctrlrun.yaml").mkdir()
    refused(run("init"), "ctrlrun.yaml exists and is not a policy file")
    assert not (empty / ".ctrlrun").exists()


def test_init_follows_ctrlrun_config_and_keeps_an_existing_store(empty, monkeypatch):
    target = empty / "conf" / "agents.yaml"
    target.parent.mkdir()
    monkeypatch.setenv("CTRLRUN_CONFIG", str(target))
    assert run("init").exit_code == 0
    assert target.read_text() == STARTER_POLICY
    assert (empty / "conf" / ".ctrlrun" / "state.db").is_file()
    target.unlink()
    assert "kept the existing store conf/.ctrlrun/state.db" in run("init").stdout


def test_init_with_a_store_url(empty):
    elsewhere = empty / "evidence.db"
    result = run("init", "--store-url", f"sqlite://{elsewhere}")
    assert f"created store sqlite://{elsewhere}" in result.stdout
    assert elsewhere.is_file() and not (empty / ".ctrlrun").exists()


def test_a_bad_store_url_is_refused_before_anything_is_written(empty):
    refused(run("init", "--store-url", "mysql://x"), "unsupported store URL")
    assert list(empty.iterdir()) == []


def test_a_policy_directory_that_does_not_exist_is_refused(empty, monkeypatch):
    monkeypatch.setenv("CTRLRUN_CONFIG", str(empty / "missing" / "ctrlrun.yaml"))
    refused(run("init"))
    assert list(empty.iterdir()) == []
