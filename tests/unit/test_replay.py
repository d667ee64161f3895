"""The pure replay of a recorded call under a candidate policy (kernel/replay.py)."""

from __future__ import annotations

from ctrlrun.config import load_policy_text
from ctrlrun.kernel.replay import (
    EXAMPLES,
    Change,
    ReplayTally,
    replay_receipt,
)

CANDIDATE = load_policy_text(
    """\
schema: ctrlrun.policy/v1
actions:
  stripe.refund:
    effect: "refund:{payment_id}"
    rules:
      - when: {amount_lte: 100}
        decision: allow
      - when: {amount_lte: 1000}
        decision: approve
      - decision: deny
  crm.read:
    decision: allow
"""
)


def receipt(amount=50, *, action="stripe.refund", decision="allow", rule="rule[0]", **extra):
    document = {
        "action": action,
        "action_id": f"act_{amount}",
        "arguments": {"payment_id": "pay_1", "amount": amount},
        "principal": {"agent": "bot", "user": None},
        "resource": None,
        "environment": "production",
        "decision": decision,
        "decision_reason": rule,
        "effect_key": "refund:pay_1" if decision != "deny" else None,
    }
    return {**document, **extra}


def test_each_new_decision_names_its_change():
    assert replay_receipt(receipt(50), CANDIDATE, {}).change is Change.UNCHANGED
    assert replay_receipt(receipt(500), CANDIDATE, {}).change is Change.NOW_NEEDS_PERSON
    assert replay_receipt(receipt(5000), CANDIDATE, {}).change is Change.NOW_DENIED
    ran = replay_receipt(receipt(50, decision="deny", rule="rule[2]"), CANDIDATE, {})
    assert ran.change is Change.NOW_RUNS and ran.new_rule == "rule[0]"


def test_keys_and_templates_are_compared_only_where_both_let_the_call_through():
    moved = replay_receipt(receipt(50, effect_key="refund:other"), CANDIDATE, {})
    assert moved.key_changed and moved.new_key == "refund:pay_1"
    assert not replay_receipt(receipt(5000), CANDIDATE, {}).key_changed  # now denied
    refused = replay_receipt(receipt(50), CANDIDATE, {"stripe.refund": "refund:{amount}"})
    assert refused.template_refused and not refused.key_changed
    assert not replay_receipt(
        receipt(50), CANDIDATE, {"stripe.refund": "refund:{payment_id}"}
    ).template_refused


def test_a_key_the_candidate_cannot_render_is_a_denial():
    document = receipt(50, arguments={"amount": 50})  # no payment_id
    call = replay_receipt(document, CANDIDATE, {})
    assert (call.new_decision, call.new_rule, call.change) == (
        "deny",
        "effect_key_error",
        Change.NOW_DENIED,
    )


def test_a_receipt_that_cannot_be_rebuilt_is_unreplayable_not_an_error():
    for broken in (
        receipt(principal="bot"),
        receipt(arguments=[1, 2]),
        receipt(action="Not A Name"),
        receipt(arguments={"x": 1.5}),
    ):
        call = replay_receipt(broken, CANDIDATE, {})
        assert call.change is Change.UNREPLAYABLE and not call.key_changed
    tally = ReplayTally()
    tally.add(replay_receipt(receipt(principal=None), CANDIDATE, {}))
    [group] = tally.ordered()
    assert group.change is Change.UNREPLAYABLE and tally.totals()["unreplayable"] == 1


def test_the_tally_groups_counts_and_keeps_few_examples():
    tally = ReplayTally()
    for amount in (10, 20, 30, 40, 500, 600):
        tally.add(replay_receipt(receipt(amount), CANDIDATE, {"stripe.refund": "x:{amount}"}))
    tally.add(
        replay_receipt(
            receipt(5, action="crm.read", rule="decision", effect_key=None), CANDIDATE, {}
        )
    )
    first, *rest = tally.ordered()
    assert first.change is Change.NOW_NEEDS_PERSON and first.calls == 2
    assert [g.change for g in rest] == [Change.UNCHANGED, Change.UNCHANGED]
    kept = next(g for g in rest if g.action == "stripe.refund")
    assert kept.calls == 4 and len(kept.examples) == EXAMPLES and kept.template_refused == 4
    assert next(g for g in rest if g.action == "crm.read").examples == []
    assert tally.totals() == {
        "calls": 7, "unchanged": 5, "now_denied": 0, "now_needs_person": 2, "now_runs": 0,
        "unreplayable": 0, "keys_changed": 0, "template_refused": 6,
    }  # fmt: skip
    assert first.to_dict()["change"] == "now_needs_person"
    denied = ReplayTally()
    denied.add(replay_receipt(receipt(5000), CANDIDATE, {}))
    assert denied.ordered()[0].change is Change.NOW_DENIED
