"""A policy says how an argument is shown (``display: {amount: {money: EUR, minor: 2}}``) and
how a call decided by one rule must be approved (``approval:`` on a rule), issue 27. The loader
stays strict: closed key sets, each refusal naming the key path and the line."""

from __future__ import annotations

from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun.config import load_policy_text
from ctrlrun.errors import PolicyError
from ctrlrun.kernel.argument_display import Money, format_money, shown_arguments, shown_value
from support.policies import POLICY

TIERED = """\
schema: ctrlrun.policy/v1
approvals: {ttl: 30m}
actions:
  stripe.refund:
    effect: "refund:{payment_id}"
    display:
      amount: {money: EUR, minor: 2}
    rules:
      - when: {amount_lte: 1000000}
        decision: approve
      - decision: approve
        approval: {count: 2, ttl: 2h}
"""


def test_money_is_written_as_people_write_it_with_the_exact_value_beside_it():
    eur = Money("EUR")
    assert format_money(250000, eur) == "€2,500.00 (250000)"
    assert format_money(-500, eur) == "-€5.00 (-500)"
    assert format_money(7, eur) == "€0.07 (7)"
    assert format_money(1234567, Money("JPY", 0)) == "¥1,234,567 (1234567)"
    assert format_money(5000, Money("CHF")) == "CHF 50.00 (5000)"
    assert format_money(12345, Money("BHD", 3)) == "BHD 12.345 (12345)"
    assert shown_value(True, eur) is None and shown_value("250000", eur) is None
    assert shown_arguments({"amount": 250000, "payment_id": "p"}, {"amount": eur}) == {
        "amount": "€2,500.00 (250000)"
    }


def test_display_is_read_from_the_entry_and_is_not_a_decision_input():
    policy = load_policy_text(TIERED)
    assert policy.entry("stripe.refund").displays == {"amount": Money("EUR", 2)}
    plain = load_policy_text(
        TIERED.replace("    display:\n      amount: {money: EUR, minor: 2}\n", "")
    )
    assert plain.policy_hash == policy.policy_hash


def test_a_policy_without_rule_approvals_hashes_as_before():
    # pinned: the shared test policy's hash must not move because rules may now carry approval
    before = load_policy_text(POLICY).policy_hash
    assert load_policy_text(POLICY).to_document()["actions"]["stripe.refund"]["rules"][1] == {
        "decision": "approve",
        "when": {"amount_lte": 1000000},
    }
    assert before == load_policy_text(POLICY).policy_hash


@pytest.mark.parametrize(
    ("fragment", "key", "line"),
    [
        (
            "      amount: {money: EUR, minor: 2, symbol: x}\n",
            "actions.stripe.refund.display.amount.symbol",
            7,
        ),
        ("      amount: {money: eur}\n", "actions.stripe.refund.display.amount", 7),
        ("      amount: {minor: 2}\n", "actions.stripe.refund.display.amount.money", 7),
        ("      amount: {money: EUR, minor: 9}\n", "actions.stripe.refund.display.amount", 7),
        ("      amount: EUR\n", "actions.stripe.refund.display.amount", 7),
    ],
)
def test_a_bad_display_is_refused_naming_the_key_and_the_line(fragment, key, line):
    text = TIERED.replace("      amount: {money: EUR, minor: 2}\n", fragment)
    with pytest.raises(PolicyError) as refused:
        load_policy_text(text, source="ctrlrun.yaml")
    assert refused.value.key == key and refused.value.line == line, refused.value.message
    assert refused.value.message.startswith(f"ctrlrun.yaml:{line}: {key}: ")


def test_a_rule_approval_is_only_for_an_approve_rule_and_its_keys_are_closed():
    denying = TIERED.replace(
        "      - decision: approve\n        approval:", "      - decision: deny\n        approval:"
    )
    with pytest.raises(PolicyError) as refused:
        load_policy_text(denying)
    assert refused.value.key == "actions.stripe.refund.rules[1].approval"
    assert refused.value.line == 12
    unknown = TIERED.replace("{count: 2, ttl: 2h}", "{count: 2, quorum: 3}")
    with pytest.raises(PolicyError) as refused:
        load_policy_text(unknown)
    assert refused.value.key == "actions.stripe.refund.rules[1].approval.quorum"


def test_a_rule_approval_is_hashed_and_round_trips():
    policy = load_policy_text(TIERED)
    rules = policy.entry("stripe.refund").rules
    assert rules[0].approval is None
    assert (rules[1].approval.count, rules[1].approval.ttl) == (2, timedelta(hours=2))
    again = ctrlrun.Policy.from_document(policy.to_document())
    assert again.policy_hash == policy.policy_hash
    assert again.entry("stripe.refund").approval_for(1).count == 2
    single = load_policy_text(TIERED.replace("        approval: {count: 2, ttl: 2h}\n", ""))
    assert single.policy_hash != policy.policy_hash


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    if request.param == "sqlite":
        opened = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    else:
        from ctrlrun.postgres import PostgresStateStore

        pg = request.getfixturevalue("pg_schema")
        opened = PostgresStateStore(pg.url, schema=pg.schema)
    yield opened
    opened.close()


def test_one_approver_up_to_ten_thousand_two_above_is_one_action(store):
    control = ctrlrun.Control(load_policy_text(TIERED), store)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        return "paid"

    with ctrlrun.context("support-bot", "alice"):
        with pytest.raises(ctrlrun.ApprovalRequired) as small:
            refund(payment_id="p_small", amount=250_000)
        with pytest.raises(ctrlrun.ApprovalRequired) as large:
            refund(payment_id="p_large", amount=2_500_000)
    small_record = store.get_approval(small.value.request_id)
    large_record = store.get_approval(large.value.request_id)
    assert small_record.required == 1 and large_record.required == 2
    assert small_record.expires_at - small_record.created_at == timedelta(minutes=30)
    assert large_record.expires_at - large_record.created_at == timedelta(hours=2)
    store.grant_approval(large_record.approval_id, "ann")
    with ctrlrun.context("support-bot", "alice"), ctrlrun.with_approval(large_record.approval_id):
        with pytest.raises(ctrlrun.ApprovalMismatch):  # one grant of the two it needs
            refund(payment_id="p_large", amount=2_500_000)
    store.grant_approval(large_record.approval_id, "ben")
    with ctrlrun.context("support-bot", "alice"), ctrlrun.with_approval(large_record.approval_id):
        assert refund(payment_id="p_large", amount=2_500_000) == "paid"
