"""What a person needs to decide, on the command line (issue 27): money as the policy's
`display:` says (`€2,500.00 (250000)`) in `approvals`, `effects` and `inspect`; a request's
rule (and its text, under the policy it was made under), environment, effect key and state and
the approvals still needed; an effect's action, principal, arguments and idempotency token."""

from __future__ import annotations

import json

import pytest

import ctrlrun
from ctrlrun.kernel.effect import idempotency_token_for
from support.cli import Scene, run
from support.policies import POLICY

DISPLAYED = POLICY.replace(
    '    effect: "refund:{payment_id}"\n',
    '    effect: "refund:{payment_id}"\n    display:\n      amount: {money: EUR, minor: 2}\n',
    1,
)


@pytest.fixture
def shown(project):
    """The project's policy says how amounts are shown (not hashed: the same policy hash)."""
    (project / "ctrlrun.yaml").write_text(DISPLAYED)
    (project / ".ctrlrun").mkdir()
    built = Scene(project)
    yield built
    built.close()


def test_approvals_show_money_rule_environment_effect_and_what_is_needed(shown):
    approval_id = shown.pending("pay_3", 250_000)
    row = run("approvals", "--pending").stdout.splitlines()[1]
    assert row.endswith('{"amount": €2,500.00 (250000), "payment_id": "pay_3"}')
    cells = row.split()
    assert cells[5:9] == ["production", "rule[1]", "1", "refund:pay_3"]
    assert "(not reserved)" in row
    [document] = map(json.loads, run("approvals", "--json").stdout.splitlines())
    assert document["approval_id"] == approval_id
    assert document["arguments_shown"] == {"amount": "€2,500.00 (250000)"}
    assert document["rule"] == "rule[1]"
    assert document["rule_text"] == "when amount_lte €10,000.00 (1000000): approve (1 approver)"
    assert (document["environment"], document["approvals_needed"]) == ("production", 1)
    assert (document["effect_key"], document["effect_state"]) == ("refund:pay_3", None)
    assert "€2,500.00 (250000)" in run("inspect", approval_id).stdout


def test_a_request_shows_its_effect_s_state_now(shown):
    approval_id = shown.pending("pay_9", 250_000)
    assert run("approve", approval_id).exit_code == 0
    assert shown.refund("pay_9", 250_000) == {"refund": "re_1"}  # the grant is spent
    [document] = map(json.loads, run("approvals", "--json").stdout.splitlines())
    assert (document["status"], document["effect_state"]) == ("consumed", "committed")
    assert document["approvals_needed"] == 0
    row = run("approvals").stdout.splitlines()[1]
    assert "refund:pay_9 (committed)" in row


def test_effects_show_what_to_check_with_the_provider(shown):
    shown.ambiguous("pay_2")
    header, row = run("effects", "--status", "ambiguous").stdout.splitlines()
    token = idempotency_token_for("refund:pay_2", 1)
    assert header.split()[-6:] == ["NAME", "REQUESTED", "BY", "IDEMPOTENCY", "TOKEN", "ARGUMENTS"]
    assert "stripe.refund  support-bot/alice" in row and token in row
    assert row.endswith('{"amount": €50.00 (5000), "payment_id": "pay_2"}')
    [document] = map(
        json.loads, run("effects", "--status", "ambiguous", "--json").stdout.split("\n")[:1]
    )
    assert document["idempotency_token"] == token
    assert document["principal"] == {"agent": "support-bot", "user": "alice"}
    assert document["arguments"] == {"amount": 5000, "payment_id": "pay_2"}


def test_a_policy_that_does_not_load_leaves_values_as_they_are(shown, project):
    shown.pending("pay_3", 250_000)
    (project / "ctrlrun.yaml").write_text(DISPLAYED + "bogus: 1\n")
    row = run("approvals", "--pending").stdout.splitlines()[1]
    assert row.endswith('{"amount": 250000, "payment_id": "pay_3"}')


def test_a_request_made_before_the_call_still_names_its_effect_key(shown):
    """A framework that pauses before calling (``Control.request_approval``) records no key:
    the listing renders it from the policy's template and the request's arguments."""
    action = ctrlrun.Action(
        "stripe.refund",
        {"payment_id": "pay_fw", "amount": 250_000},
        ctrlrun.Principal("support-bot", "alice"),
        environment="staging",
    )
    shown.control.request_approval(action)
    [document] = map(json.loads, run("approvals", "--json").stdout.splitlines())
    assert (document["effect_key"], document["effect_state"]) == ("refund:pay_fw", None)
    assert document["environment"] == "staging"
