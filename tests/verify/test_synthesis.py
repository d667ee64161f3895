"""Argument synthesis lands every reachable rule, deterministically, and says when it cannot."""

from __future__ import annotations

import pytest

from ctrlrun.config import load_policy_text
from ctrlrun.kernel.policy import Decision
from ctrlrun.verify import synthesis
from ctrlrun.verify.synthesis import SynthesisError, solve, targets, variants

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  pay.out:
    effect: "payout:{account}:{batch}"
    rules:
      - when: {currency_neq: EUR}
        decision: deny
      - when: {amount_gt: 500, region_in: [eu, uk]}
        decision: approve
      - when: {amount_lte: 500, flagged_eq: false}
        decision: allow
      - when: {amount_lte: 500}
        decision: approve
      - decision: deny
  z.last:
    decision: allow
  a.never:
    rules:
      - when: {n_gt: 5, n_lt: 3}
        decision: allow
      - decision: deny
"""


@pytest.fixture
def policy():
    return load_policy_text(POLICY)


def test_targets_are_sorted_by_name_then_rule(policy):
    labels = [t.label for t in targets(policy, [Decision.ALLOW, Decision.APPROVE])]
    assert labels == [
        "a.never (rule[0]: allow)",
        "pay.out (rule[1]: approve)",
        "pay.out (rule[2]: allow)",
        "pay.out (rule[3]: approve)",
        "z.last (decision: allow)",
    ]


@pytest.mark.parametrize("rule", [0, 1, 2, 3])
def test_every_reachable_rule_is_landed_and_confirmed(policy, rule):
    target = next(
        t for t in targets(policy, Decision) if t.entry.name == "pay.out" and t.rule == rule
    )
    vector = solve(policy, target)
    assert vector is not None
    evaluation = policy.evaluate(vector.action())
    assert (evaluation.rule, evaluation.decision) == (rule, target.decision)
    assert vector.effect_key == f"payout:{vector.arguments['account']}:{vector.arguments['batch']}"


def test_earlier_rules_are_falsified_with_evaluable_values(policy):
    target = next(t for t in targets(policy, Decision) if t.rule == 3)
    vector = solve(policy, target)
    # rule 2 must miss although amount <= 500 holds: flagged must be a boolean that is true
    assert vector.arguments["flagged"] is True and vector.arguments["amount"] <= 500
    assert vector.arguments["currency"] == "EUR"


def test_invented_values_are_recognisable(policy):
    vector = solve(policy, targets(policy, [Decision.ALLOW])[-1])
    assert vector.arguments == {}
    keyed = solve(policy, next(t for t in targets(policy, Decision) if t.rule == 2))
    assert keyed.arguments["account"].startswith("ctrlrun-verify")


def test_an_unsatisfiable_rule_has_no_vector(policy):
    assert solve(policy, targets(policy, [Decision.ALLOW])[0]) is None


def test_solving_is_deterministic(policy):
    first = [solve(policy, t) for t in targets(policy, Decision)]
    second = [solve(policy, t) for t in targets(policy, Decision)]
    assert [v and dict(v.arguments) for v in first] == [v and dict(v.arguments) for v in second]


def test_variants_differ_in_the_effect_key_and_stay_in_the_rule(policy):
    target = next(t for t in targets(policy, Decision) if t.rule == 2)
    found = variants(policy, target, 9)
    assert len({v.effect_key for v in found}) == 9
    assert {policy.evaluate(v.action()).rule for v in found} == {2}


def test_a_key_fixed_by_the_rule_cannot_vary():
    fixed = load_policy_text(
        "schema: ctrlrun.policy/v1\nactions:\n  a.b:\n    effect: 'k:{x}'\n    rules:\n"
        "      - when: {x_eq: only}\n        decision: allow\n      - decision: deny\n"
    )
    assert len(variants(fixed, targets(fixed, [Decision.ALLOW])[0], 3)) == 1


def test_a_resource_placeholder_gets_a_resource():
    doc = load_policy_text(
        "schema: ctrlrun.policy/v1\nactions:\n  a.b:\n    effect: 'k:{resource}'\n"
        "    decision: allow\n"
    )
    vector = solve(doc, targets(doc, [Decision.ALLOW])[0])
    assert (
        vector.resource == "ctrlrun-verify-resource"
        and vector.effect_key == "k:ctrlrun-verify-resource"
    )


def test_a_vector_the_policy_decides_otherwise_is_verifys_own_error(policy, monkeypatch):
    target = next(t for t in targets(policy, Decision) if t.rule == 2)
    real = synthesis._solutions

    def wrong(target_, pins):
        for arguments in real(target_, pins):
            yield {**arguments, "currency": "USD"}

    monkeypatch.setattr(synthesis, "_solutions", wrong)
    with pytest.raises(SynthesisError, match="but the policy decided deny"):
        solve(policy, target)
