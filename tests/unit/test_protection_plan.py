"""``plan_protection``: every way a policy can fail to fit a protected function, and none when
it fits."""

from __future__ import annotations

from ctrlrun.config import load_policy_text
from ctrlrun.kernel.protection import FindingKind, plan_protection
from ctrlrun.kernel.template import Template

POLICY = load_policy_text("""\
schema: ctrlrun.policy/v1
actions:
  crm.read:
    decision: allow
    resource: "customer:{customer}"
  mail.send:
    decision: allow
    effect: "mail:{to}:{resource}"
    resource: "box:{to}"
  iam.grant_admin:
    decision: deny
  iam.revoke:
    rules:
      - when: {role_eq: admin}
        decision: deny
      - decision: deny
""")


def kinds(found):
    return [f.kind for f in found]


def test_a_fitting_function_has_no_findings():
    assert plan_protection(POLICY, "crm.read", frozenset({"customer"})) == ()
    # {resource} in an effect template reads the action's resource, not a parameter
    assert plan_protection(POLICY, "mail.send", frozenset({"to", "body"})) == ()


def test_an_unnamed_action_is_one_finding():
    [finding] = plan_protection(POLICY, "crm.write", frozenset())
    assert finding.kind is FindingKind.UNKNOWN_ACTION
    assert str(finding) == "crm.write: the policy does not name it"


def test_every_missing_parameter_is_listed():
    found = plan_protection(POLICY, "mail.send", frozenset({"body"}))
    assert kinds(found) == [FindingKind.MISSING_PARAMETER] * 2
    assert "effect template 'mail:{to}:{resource}' names 'to'" in found[0].detail
    assert "resource template 'box:{to}' names 'to'" in found[1].detail
    assert kinds(plan_protection(POLICY, "iam.revoke", frozenset())) == [
        FindingKind.MISSING_PARAMETER,
        FindingKind.ALWAYS_DENIED,
    ]


def test_the_function_s_own_templates_win():
    own = Template.parse("id:{customer_id}")
    assert plan_protection(POLICY, "crm.read", frozenset({"customer_id"}), resource=own) == ()
    found = plan_protection(POLICY, "crm.read", frozenset({"x"}), resource=own)
    assert "'id:{customer_id}'" in found[0].detail


def test_an_action_every_call_of_which_is_denied():
    [finding] = plan_protection(POLICY, "iam.grant_admin", frozenset({"user"}))
    assert finding.kind is FindingKind.ALWAYS_DENIED
