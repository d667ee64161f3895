"""Controls: the written expectations a policy cites, carried by every decision taken under
them (the receipts cite them; ``ctrlrun receipts --control ID`` filters by them)."""

from __future__ import annotations

import pytest

from ctrlrun import Action, InvalidArgument, PolicyError, Principal
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.policy import ActionPolicy, ControlEntry, Decision, Policy, Reason, Rule

POLICY = """\
schema: ctrlrun.policy/v1
controls:
  FIN-7:
    title: Refunds above 1,000 EUR need a second person
    source: finance handbook, section 7
  SOC2:CC6.1:
    title: Logical access is restricted
actions:
  stripe.refund:
    controls: [FIN-7]
    effect: "refund:{payment_id}"
    rules:
      - when: {amount_lte: 100000}
        decision: allow
      - when: {amount_lte: 1000000}
        decision: approve
        controls: [SOC2:CC6.1]
      - decision: deny
  iam.grant:
    controls: [SOC2:CC6.1]
    decision: approve
  email.send:
    decision: allow
"""


def act(name: str, **arguments: object) -> Action:
    return Action(name, arguments, Principal("bot", "alice"))


@pytest.fixture
def policy() -> Policy:
    return load_policy_text(POLICY)


def test_the_registry_is_read_sorted_with_titles_and_sources(policy):
    assert list(policy.controls) == ["FIN-7", "SOC2:CC6.1"]
    fin = policy.controls["FIN-7"]
    assert (fin.title, fin.source) == (
        "Refunds above 1,000 EUR need a second person",
        "finance handbook, section 7",
    )
    assert policy.controls["SOC2:CC6.1"].source is None


def test_a_decision_carries_the_entrys_and_the_deciding_rules_controls(policy):
    small = policy.evaluate(act("stripe.refund", payment_id="p", amount=50))
    assert (small.decision, small.controls) == (Decision.ALLOW, ("FIN-7",))
    large = policy.evaluate(act("stripe.refund", payment_id="p", amount=500_000))
    assert (large.decision, large.controls) == (Decision.APPROVE, ("FIN-7", "SOC2:CC6.1"))
    assert policy.evaluate(act("iam.grant", role="admin")).controls == ("SOC2:CC6.1",)
    assert policy.evaluate(act("email.send", to="x")).controls == ()


def test_refusals_cite_what_they_were_decided_under(policy):
    unevaluable = policy.evaluate(act("stripe.refund", payment_id="p"))  # no amount
    assert unevaluable.reason is Reason.CONDITION_UNEVALUABLE
    assert unevaluable.controls == ("FIN-7",)
    assert policy.evaluate(act("no.such")).controls == ()  # no entry: nothing was cited
    only_rules = Policy(
        [ActionPolicy("a.b", rules=(Rule((), Decision.DENY, ("X-1",)),), controls=("X-2",))],
        controls=[ControlEntry("X-1", "one"), ControlEntry("X-2", "two")],
    )
    assert only_rules.evaluate(act("a.b")).controls == ("X-1", "X-2")


def test_controls_are_part_of_the_policy_hash_and_absent_ones_change_nothing(policy):
    retitled = load_policy_text(POLICY.replace("Logical access is restricted", "Access"))
    assert retitled.policy_hash != policy.policy_hash
    bare = "schema: ctrlrun.policy/v1\nactions:\n  email.send:\n    decision: allow\n"
    with_empty = bare.replace("actions:", "controls: {}\nactions:")
    assert load_policy_text(bare).policy_hash == load_policy_text(with_empty).policy_hash
    assert load_policy_text(bare).to_document() == {
        "schema": "ctrlrun.policy/v1",
        "actions": {"email.send": {"decision": "allow"}},
    }
    again = Policy.from_document(policy.to_document())
    assert again.policy_hash == policy.policy_hash and again.controls == policy.controls


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (("controls: [FIN-7]", "controls: [FIN-8]"), "cites control 'FIN-8'"),
        (
            ("controls: [SOC2:CC6.1]\n      - decision", "controls: [NOPE]\n      - decision"),
            "NOPE",
        ),
        (("controls: [FIN-7]", "controls: FIN-7"), "must be a list"),
        (("controls: [FIN-7]", "controls: [FIN-7, FIN-7]"), "repeated"),
        (("controls: [FIN-7]", "controls: ['-x']"), "control id '-x'"),
        (("    title: Logical access is restricted\n", "    source: x\n"), "title"),
        (("    source: finance handbook, section 7\n", "    owner: cfo\n"), "unknown key"),
    ],
)
def test_a_bad_control_is_a_located_policy_error(change, fragment):
    old, new = change
    assert old in POLICY
    with pytest.raises(PolicyError) as caught:
        load_policy_text(POLICY.replace(old, new, 1), source="ctrlrun.yaml")
    assert fragment in str(caught.value)
    assert caught.value.path == "ctrlrun.yaml" and caught.value.line is not None


def test_the_python_api_holds_the_same_rules():
    with pytest.raises(InvalidArgument, match="does not define"):
        Policy([ActionPolicy("a.b", decision=Decision.ALLOW, controls=("X-1",))])
    with pytest.raises(InvalidArgument, match="given twice"):
        Policy([], controls=[ControlEntry("X-1", "a"), ControlEntry("X-1", "b")])
    with pytest.raises(InvalidArgument, match="title"):
        ControlEntry("X-1", "  ")
    with pytest.raises(InvalidArgument, match="source"):
        ControlEntry("X-1", "t", source="")
    with pytest.raises(InvalidArgument, match="ControlEntry"):
        Policy([], controls=["X-1"])  # type: ignore[list-item]
