"""The policy model and its fail-closed evaluation (ARCHITECTURE §2 decide, §6)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from ctrlrun import Action, InvalidArgument, PolicyError, Principal
from ctrlrun.config import load_policy_file, load_policy_text
from ctrlrun.errors import DenyReason
from ctrlrun.kernel.policy import (
    POLICY_SCHEMA,
    ActionPolicy,
    Condition,
    Decision,
    Evaluation,
    Op,
    Policy,
    Reason,
    Rule,
)
from ctrlrun.kernel.policy_model import json_type
from ctrlrun.kernel.template import Template

ALLOW, APPROVE, DENY = Decision.ALLOW, Decision.APPROVE, Decision.DENY
BOT = Principal("bot", "alice")


def act(name: str = "pay.refund", **arguments: Any) -> Action:
    return Action(name, arguments, BOT)


def one_rule(key: str, value: Any) -> Policy:
    """A policy whose only rule allows ``pay.refund`` when ``key: value`` holds."""
    rule = Rule((Condition.parse(key, value),), ALLOW)
    return Policy([ActionPolicy("pay.refund", rules=(rule,))])


def rules(*items: tuple[dict[str, Any], Decision]) -> Policy:
    built = tuple(
        Rule(tuple(Condition.parse(k, v) for k, v in when.items()), decision)
        for when, decision in items
    )
    return Policy([ActionPolicy("pay.refund", rules=built)])


# --- evaluation of single conditions ------------------------------------------------------

# (condition key, condition value, argument value, holds: True / False / None = unevaluable)
TABLE: list[tuple[str, Any, Any, bool | None]] = [
    ("x_eq", "usd", "usd", True),
    ("x_eq", "usd", "eur", False),
    ("x_eq", 5, 5, True),
    ("x_eq", 5, 6, False),
    ("x_eq", True, True, True),
    ("x_eq", True, False, False),
    ("x_neq", "usd", "eur", True),
    ("x_neq", "usd", "usd", False),
    ("x_neq", 5, 6, True),
    ("x_neq", 5, 5, False),
    ("x_lt", 10, 9, True),
    ("x_lt", 10, 10, False),
    ("x_lte", 10, 10, True),
    ("x_lte", 10, 11, False),
    ("x_gt", 10, 11, True),
    ("x_gt", 10, 10, False),
    ("x_gte", 10, 10, True),
    ("x_gte", 10, 9, False),
    ("x_gte", -5, -5, True),
    ("x_in", ["usd", "eur"], "eur", True),
    ("x_in", ["usd", "eur"], "gbp", False),
    ("x_in", [1, 2], 2, True),
    ("x_in", [1, 2], 3, False),
    # JSON-strict: a bool is not an integer and an integer is not a string.
    ("x_eq", 1, True, None),
    ("x_eq", True, 1, None),
    ("x_eq", 1, "1", None),
    ("x_eq", "1", 1, None),
    ("x_neq", 1, True, None),
    ("x_neq", "usd", 5, None),
    ("x_in", [1, 2], True, None),
    ("x_in", [1, 2], "1", None),
    ("x_in", ["usd"], ["usd"], None),
    ("x_eq", "usd", {"code": "usd"}, None),
    ("x_lte", 10, True, None),
    ("x_lte", 10, "5", None),
    ("x_gt", 0, None, None),
    ("x_lt", 10, [1], None),
    # A mixed list is evaluable when any member has the argument's type.
    ("x_in", [1, "one"], "one", True),
    ("x_in", [1, "one"], 2, False),
    # A null in the policy is an explicit test for null; a null argument is not a string.
    ("x_eq", None, None, True),
    ("x_eq", None, "usd", False),
    ("x_neq", None, "usd", True),
    ("x_neq", None, None, False),
    ("x_in", ["usd", None], None, True),
    ("x_in", ["usd", None], 7, False),
    ("x_eq", "usd", None, None),
]


class TestConditions:
    @pytest.mark.parametrize(("key", "value", "argument", "holds"), TABLE)
    def test_each_operator_both_ways_and_json_strictness(
        self, key: str, value: Any, argument: Any, holds: bool | None
    ) -> None:
        """A condition holds, fails or is unevaluable exactly as the table says."""
        condition = Condition.parse(key, value)
        assert condition.holds(argument) is holds
        evaluation = one_rule(key, value).evaluate(act(x=argument))
        if holds is True:
            assert evaluation == Evaluation(ALLOW, Reason.RULE, 0)
        elif holds is False:
            assert evaluation == Evaluation(DENY, Reason.NO_MATCHING_RULE)
        else:
            assert evaluation == Evaluation(DENY, Reason.CONDITION_UNEVALUABLE, 0, key)

    def test_an_absent_argument_is_unevaluable(self) -> None:
        """A condition on an argument the action does not carry denies, naming the rule."""
        evaluation = one_rule("x_eq", None).evaluate(act(y=1))
        assert evaluation == Evaluation(DENY, Reason.CONDITION_UNEVALUABLE, 0, "x_eq")
        assert evaluation.deny_reason is DenyReason.CONDITION_UNEVALUABLE

    def test_the_key_splits_at_the_last_underscore(self) -> None:
        """``payment_amount_gte`` tests the argument ``payment_amount`` with ``gte``."""
        condition = Condition.parse("payment_amount_gte", 100)
        assert condition == Condition("payment_amount", Op.GTE, 100)
        assert condition.key == "payment_amount_gte"
        assert Condition.parse("a_in", ["x"]).value == ("x",)

    @pytest.mark.parametrize("key", ["amount", "amount_", "_eq", "amount_like", "amount_EQ", ""])
    def test_a_key_without_a_known_operator_is_refused(self, key: str) -> None:
        """A key that is not ``<argument>_<op>`` names the seven operators."""
        with pytest.raises(InvalidArgument, match="eq, neq, in, lt, lte, gt, gte"):
            Condition.parse(key, 1)

    @pytest.mark.parametrize(
        ("op", "value", "message"),
        [
            (Op.EQ, 1.5, "integer minor units"),
            (Op.LTE, 1.5, "integer minor units"),
            (Op.IN, (1, 2.5), "integer minor units"),
            (Op.LT, True, "integers only"),
            (Op.GTE, "5", "integers only"),
            (Op.GT, None, "integers only"),
            (Op.EQ, ["usd"], "a string, an integer, a boolean or null"),
            (Op.NEQ, {"a": 1}, "a string, an integer, a boolean or null"),
            (Op.IN, "usd", "list of scalars"),
            (Op.IN, None, "list of scalars"),
            (Op.IN, (), "non-empty"),
            (Op.IN, (["usd"],), "a string, an integer, a boolean or null"),
            (Op.IN, ("usd", "eur", "usd"), "listed twice"),
            (Op.IN, (1, True, 1), "listed twice"),
        ],
    )
    def test_a_value_of_the_wrong_shape_is_refused(self, op: Op, value: Any, message: str) -> None:
        """Each operator accepts exactly the values it can compare."""
        with pytest.raises(InvalidArgument, match=message):
            Condition("amount", op, value)

    def test_true_and_one_are_distinct_members(self) -> None:
        """``in: [1, true]`` is not a repeat: the JSON values differ."""
        assert Condition("x", Op.IN, (1, True)).holds(True) is True

    @pytest.mark.parametrize("argument", ["", None, 5])
    def test_an_argument_name_is_required(self, argument: Any) -> None:
        """A condition without an argument name is refused."""
        with pytest.raises(InvalidArgument, match="argument name"):
            Condition(argument, Op.EQ, 1)

    @pytest.mark.parametrize("argument", ["agent", "user", "principal", "resource", "environment"])
    def test_reserved_subjects_are_refused(self, argument: str) -> None:
        """A condition cannot pretend to test who is asking: it would read a caller's argument."""
        with pytest.raises(InvalidArgument, match="not who is asking"):
            Condition(argument, Op.EQ, "alice")

    def test_the_operator_must_be_an_op(self) -> None:
        """A bare string is not accepted as an operator."""
        with pytest.raises(InvalidArgument, match="op must be an Op"):
            Condition("amount", "eq", 1)  # type: ignore[arg-type]

    def test_in_members_are_canonically_ordered_in_the_document(self) -> None:
        """``to_value`` orders ``in`` members by canonical JSON; other values are as given."""
        assert Condition("x", Op.IN, ("b", 2, "a", None)).to_value() == ["a", "b", 2, None]
        assert Condition("x", Op.EQ, "b").to_value() == "b"


# --- evaluation of rules and entries ------------------------------------------------------


class TestEvaluation:
    def test_the_first_matching_rule_wins(self) -> None:
        """Rules are tried in order; later matches are never reached."""
        policy = rules(({"x_lte": 10}, APPROVE), ({"x_lte": 100}, ALLOW), ({}, DENY))
        assert policy.evaluate(act(x=5)) == Evaluation(APPROVE, Reason.RULE, 0)
        assert policy.evaluate(act(x=50)) == Evaluation(ALLOW, Reason.RULE, 1)
        assert policy.evaluate(act(x=500)) == Evaluation(DENY, Reason.RULE, 2)

    def test_conditions_in_one_when_are_all_required(self) -> None:
        """Conditions of one rule are ANDed."""
        policy = rules(({"x_gte": 0, "x_lte": 10, "c_eq": "usd"}, ALLOW))
        assert policy.evaluate(act(x=5, c="usd")).decision is ALLOW
        assert policy.evaluate(act(x=5, c="eur")).reason is Reason.NO_MATCHING_RULE
        assert policy.evaluate(act(x=11, c="usd")).reason is Reason.NO_MATCHING_RULE
        assert policy.evaluate(act(x=-1, c="usd")).reason is Reason.NO_MATCHING_RULE

    def test_unknown_action_is_denied(self) -> None:
        """An action the policy does not name is denied, whatever it carries."""
        evaluation = rules(({}, ALLOW)).evaluate(act("pay.charge", x=1))
        assert evaluation == Evaluation(DENY, Reason.UNKNOWN_ACTION)
        assert evaluation.deny_reason is DenyReason.UNKNOWN_ACTION
        assert evaluation.label == "unknown_action"

    def test_no_matching_rule_is_denied(self) -> None:
        """When every rule misses, the answer is deny, never a default allow."""
        evaluation = rules(({"x_eq": 1}, ALLOW)).evaluate(act(x=2))
        assert evaluation == Evaluation(DENY, Reason.NO_MATCHING_RULE)
        assert evaluation.deny_reason is DenyReason.NO_MATCHING_RULE
        assert evaluation.label == "no_matching_rule"

    def test_unevaluable_denies_even_when_a_later_rule_would_allow(self) -> None:
        """An unevaluable deny rule is not skipped: skipping it would fall through to allow."""
        policy = rules(({"x_gt": 100}, DENY), ({}, ALLOW))
        evaluation = policy.evaluate(act(x="9999"))
        assert evaluation == Evaluation(DENY, Reason.CONDITION_UNEVALUABLE, 0, "x_gt")
        assert evaluation.label == "condition_unevaluable:rule[0].x_gt"
        assert evaluation.deny_reason is DenyReason.CONDITION_UNEVALUABLE

    def test_unevaluable_names_the_rule_it_was_found_in(self) -> None:
        """Rules before the unevaluable one are evaluated normally; its index is reported."""
        policy = rules(({"x_eq": 1}, ALLOW), ({"y_lte": 5}, APPROVE), ({}, ALLOW))
        assert policy.evaluate(act(x=2)) == Evaluation(
            DENY, Reason.CONDITION_UNEVALUABLE, 1, "y_lte"
        )
        assert policy.evaluate(act(x=1)) == Evaluation(ALLOW, Reason.RULE, 0)

    @pytest.mark.parametrize(
        "when",
        [{"x_eq": 1, "y_lte": 5}, {"y_lte": 5, "x_eq": 1}],
        ids=["false-first", "unevaluable-first"],
    )
    def test_unevaluable_is_not_short_circuited_by_a_false_condition(
        self, when: dict[str, Any]
    ) -> None:
        """However the conditions are written, one that cannot be evaluated denies."""
        evaluation = rules((when, ALLOW), ({}, ALLOW)).evaluate(act(x=2))
        assert evaluation == Evaluation(DENY, Reason.CONDITION_UNEVALUABLE, 0, "y_lte")

    @pytest.mark.parametrize("decision", list(Decision))
    def test_an_entry_level_decision_applies_to_every_call(self, decision: Decision) -> None:
        """``decision:`` on an entry decides every call, arguments unseen."""
        policy = Policy([ActionPolicy("pay.refund", decision=decision)])
        evaluation = policy.evaluate(act(anything=[1, {"a": None}]))
        assert evaluation == Evaluation(decision, Reason.DECISION)
        assert evaluation.label == "decision"
        expected = DenyReason.POLICY if decision is DENY else None
        assert evaluation.deny_reason is expected

    def test_labels_and_deny_reasons_of_rules(self) -> None:
        """A matched rule is ``rule[N]`` (zero-based); an explicit deny is ``policy``."""
        policy = rules(({"x_eq": 1}, ALLOW), ({"x_eq": 2}, APPROVE), ({}, DENY))
        assert [policy.evaluate(act(x=n)).label for n in (1, 2, 3)] == [
            "rule[0]",
            "rule[1]",
            "rule[2]",
        ]
        assert policy.evaluate(act(x=1)).deny_reason is None
        assert policy.evaluate(act(x=2)).deny_reason is None
        assert policy.evaluate(act(x=3)).deny_reason is DenyReason.POLICY

    def test_the_principal_is_not_read(self) -> None:
        """Only name and arguments decide: a different principal gets the same answer."""
        policy = rules(({"x_eq": 1}, ALLOW))
        other = Action("pay.refund", {"x": 1}, Principal("someone-else"))
        assert policy.evaluate(other) == policy.evaluate(act(x=1))

    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ({"decision": ALLOW, "reason": Reason.RULE}, "does not fit"),
            ({"decision": ALLOW, "reason": Reason.DECISION, "rule": 0}, "does not fit"),
            ({"decision": ALLOW, "reason": Reason.UNKNOWN_ACTION}, "must deny"),
            ({"decision": APPROVE, "reason": Reason.NO_MATCHING_RULE}, "must deny"),
            ({"decision": DENY, "reason": Reason.CONDITION_UNEVALUABLE, "rule": 0}, "condition"),
            ({"decision": DENY, "reason": Reason.RULE, "rule": 0, "condition": "x_eq"}, "cond"),
        ],
    )
    def test_an_inconsistent_evaluation_cannot_be_built(
        self, fields: dict[str, Any], message: str
    ) -> None:
        """The fail-closed reasons always deny; rule and condition appear only where they fit."""
        with pytest.raises(InvalidArgument, match=message):
            Evaluation(**fields)


# --- the model's own refusals ---------------------------------------------------------------


class TestModel:
    def test_rules_keep_their_conditions_in_key_order(self) -> None:
        """The order a ``when`` was written in does not matter: equal rules compare equal."""
        a, b = Condition("b", Op.EQ, 1), Condition("a", Op.EQ, 1)
        assert Rule((a, b), ALLOW).when == (b, a)
        assert Rule((a, b), ALLOW) == Rule((b, a), ALLOW)

    @pytest.mark.parametrize(
        ("when", "decision", "message"),
        [
            ((), "allow", "must be a Decision"),
            ([Condition("a", Op.EQ, 1)], ALLOW, "tuple of Conditions"),
            (("a_eq",), ALLOW, "tuple of Conditions"),
            ((Condition("a", Op.EQ, 1), Condition("a", Op.EQ, 2)), ALLOW, "repeated"),
        ],
    )
    def test_rule_refusals(self, when: Any, decision: Any, message: str) -> None:
        """A rule needs a Decision and distinct Conditions."""
        with pytest.raises(InvalidArgument, match=message):
            Rule(when, decision)

    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ({"name": "not a name", "decision": ALLOW}, "dotted identifiers"),
            ({"name": "a"}, "exactly one of decision and rules$"),
            ({"name": "a", "decision": ALLOW, "rules": (Rule((), ALLOW),)}, "not both"),
            ({"name": "a", "decision": "allow"}, "must be a Decision"),
            ({"name": "a", "rules": [Rule((), ALLOW)]}, "tuple of Rules"),
            ({"name": "a", "rules": ("allow",)}, "tuple of Rules"),
            ({"name": "a", "rules": (Rule((), ALLOW), Rule((), DENY))}, r"rule \[1\] can never"),
            ({"name": "a", "decision": ALLOW, "max_attempts": 0}, ">= 1"),
            ({"name": "a", "decision": ALLOW, "max_attempts": -1}, ">= 1"),
            ({"name": "a", "decision": ALLOW, "max_attempts": True}, ">= 1"),
            ({"name": "a", "decision": ALLOW, "max_attempts": "3"}, ">= 1"),
            ({"name": "a", "decision": ALLOW, "resource": Template.parse("{resource}")}, "itself"),
            ({"name": "a", "decision": ALLOW, "description": 5}, "description"),
            ({"name": "a", "decision": ALLOW, "effect": "refund:{id}"}, "parsed Templates"),
            ({"name": "a", "decision": ALLOW, "resource": "payment:{id}"}, "parsed Templates"),
        ],
    )
    def test_action_policy_refusals(self, fields: dict[str, Any], message: str) -> None:
        """An entry that could not be evaluated safely is refused at construction."""
        with pytest.raises(InvalidArgument, match=message):
            ActionPolicy(**fields)

    def test_an_entry_keeps_what_it_was_given(self) -> None:
        """Templates, the attempt ceiling and the description are held as given."""
        entry = ActionPolicy(
            "pay.refund",
            decision=APPROVE,
            effect=Template.parse("refund:{payment_id}:{resource}"),
            resource=Template.parse("payment:{payment_id}"),
            max_attempts=3,
            description="why",
        )
        policy = Policy([entry])
        assert policy.entry("pay.refund") is entry
        assert policy.entry("pay.charge") is None
        assert policy.to_document()["actions"]["pay.refund"] == {
            "decision": "approve",
            "effect": "refund:{payment_id}:{resource}",
            "resource": "payment:{payment_id}",
            "max_attempts": 3,
        }

    def test_policy_refusals(self) -> None:
        """A policy holds ActionPolicies with distinct names."""
        with pytest.raises(InvalidArgument, match="expected an ActionPolicy"):
            Policy(["pay.refund"])  # type: ignore[list-item]
        entry = ActionPolicy("a", decision=ALLOW)
        with pytest.raises(InvalidArgument, match="given twice"):
            Policy([entry, ActionPolicy("a", decision=DENY)])

    def test_the_actions_view_is_read_only(self) -> None:
        """Nobody can add an allow to a loaded policy through ``actions``."""
        policy = Policy([ActionPolicy("a", decision=DENY)])
        with pytest.raises(TypeError):
            policy.actions["a"] = ActionPolicy("a", decision=ALLOW)  # type: ignore[index]
        assert dict(policy.actions) == {"a": ActionPolicy("a", decision=DENY)}

    def test_identity_and_description(self) -> None:
        """A policy states its schema and source, and equals another with the same inputs."""
        one = Policy([ActionPolicy("a", decision=DENY)], source="x.yaml")
        two = Policy([ActionPolicy("a", decision=DENY, description="no")])
        assert one.schema == POLICY_SCHEMA == "ctrlrun.policy/v1"
        assert (one.source, two.source) == ("x.yaml", None)
        assert one == two
        assert hash(one) == hash(two)
        assert one != Policy([ActionPolicy("a", decision=ALLOW)])
        assert one != one.policy_hash
        assert repr(one) == f"Policy(1 actions, {one.policy_hash[:15]}…)"

    @pytest.mark.parametrize(
        ("value", "name"),
        [
            (None, "null"),
            (True, "boolean"),
            (1, "integer"),
            ("s", "string"),
            (1.5, "float"),
            ([1], "list"),
            ((1,), "list"),
            ({"a": 1}, "mapping"),
            (b"x", "bytes"),
        ],
    )
    def test_json_type_names(self, value: Any, name: str) -> None:
        """Messages name JSON types, and a bool is never called an integer."""
        assert json_type(value) == name


# --- the policy hash ------------------------------------------------------------------------

BASE = """\
schema: ctrlrun.policy/v1
actions:
  pay.refund:
    description: Refunds under a limit run alone.
    effect: "refund:{payment_id}"
    resource: "payment:{payment_id}"
    max_attempts: 3
    rules:
      - when: {amount_gte: 0, amount_lte: 5000, currency_in: [usd, eur]}
        decision: allow
      - when: {amount_gt: 5000}
        decision: approve
      - decision: deny
  ns.delete:
    decision: approve
"""

REFORMATTED = """\
# the same decisions, written differently
actions:
  ns.delete: {decision: approve}   # a comment
  "pay.refund":
    rules:
      - decision: allow
        when:
          currency_in:
            - eur
            - usd
          amount_lte: 5000
          amount_gte: 0
      - {decision: approve, when: {amount_gt: 5000}}
      - decision: deny
    max_attempts: 3
    resource: 'payment:{payment_id}'
    effect: refund:{payment_id}
    description: >
      A different description is not a decision input.
schema: "ctrlrun.policy/v1"
"""


class TestPolicyHash:
    def test_hash_ignores_formatting_comments_order_and_descriptions(self) -> None:
        """Reformatting, comments, key order, ``in`` order and descriptions leave it alone."""
        base = load_policy_text(BASE)
        assert base.policy_hash.startswith("sha256:")
        assert len(base.policy_hash) == len("sha256:") + 64
        assert load_policy_text(REFORMATTED).policy_hash == base.policy_hash

    @pytest.mark.parametrize(
        ("old", "new"),
        [
            ("amount_lte: 5000", "amount_lte: 5001"),
            ("amount_gte: 0", "amount_gt: 0"),
            ("currency_in: [usd, eur]", "currency_in: [usd]"),
            ("currency_in: [usd, eur]", "currency_eq: usd"),
            ("decision: allow", "decision: approve"),
            ("      - decision: deny\n", "      - decision: approve\n"),
            ('effect: "refund:{payment_id}"', 'effect: "refund:{id}"'),
            ('resource: "payment:{payment_id}"', 'resource: "pay:{payment_id}"'),
            ('    resource: "payment:{payment_id}"\n', ""),
            ("max_attempts: 3", "max_attempts: 4"),
            ("ns.delete", "ns.remove"),
            ("  ns.delete:\n    decision: approve\n", ""),
            ("ns.delete:\n    decision: approve", "ns.delete:\n    decision: deny"),
        ],
    )
    def test_hash_changes_with_every_decision_input(self, old: str, new: str) -> None:
        """Any change to what decides a call changes the hash."""
        assert old in BASE
        changed = BASE.replace(old, new, 1)
        assert load_policy_text(changed).policy_hash != load_policy_text(BASE).policy_hash

    def test_rule_order_is_a_decision_input(self) -> None:
        """Swapping two rules changes which one wins, so it changes the hash."""
        one = rules(({"x_eq": 1}, ALLOW), ({"y_eq": 1}, DENY))
        two = rules(({"y_eq": 1}, DENY), ({"x_eq": 1}, ALLOW))
        assert one.policy_hash != two.policy_hash

    def test_the_document_round_trips(self) -> None:
        """``from_document(to_document())`` has the same hash and decides the same."""
        base = load_policy_text(BASE)
        again = Policy.from_document(base.to_document())
        assert again.policy_hash == base.policy_hash
        assert again.to_document() == base.to_document()
        call = act(amount=10, currency="usd", payment_id="p1")
        assert again.evaluate(call) == base.evaluate(call) == Evaluation(ALLOW, Reason.RULE, 0)

    def test_to_document_is_a_fresh_copy(self) -> None:
        """Mutating the returned document changes neither the policy nor its hash."""
        policy = load_policy_text(BASE)
        document = policy.to_document()
        document["actions"].clear()
        assert policy.to_document()["actions"]
        assert Policy.from_document(policy.to_document()).policy_hash == policy.policy_hash


# --- loading entry points on the kernel class ---------------------------------------------


class TestEntryPoints:
    def test_from_file_reads_and_names_the_file(self, tmp_path: Any) -> None:
        """``load_policy_file`` loads a file and names it in its errors."""
        good = tmp_path / "ctrlrun.yaml"
        good.write_text(BASE, encoding="utf-8")
        assert load_policy_file(good).source == str(good)
        with pytest.raises(PolicyError) as caught:
            load_policy_file(tmp_path / "missing.yaml")
        assert caught.value.path == str(tmp_path / "missing.yaml")

    def test_from_document_refuses_with_policy_error(self) -> None:
        """A document that is not a policy raises ``PolicyError``, naming the key."""
        with pytest.raises(PolicyError) as caught:
            Policy.from_document({"schema": POLICY_SCHEMA, "actions": {"a": {"decision": 1.5}}})
        assert caught.value.key == "actions.a.decision"
        assert caught.value.line is None

    def test_text_without_a_canonical_form_is_a_policy_error(self) -> None:
        """A lone surrogate in a decision input cannot be hashed: PolicyError, not a crash."""
        rule = {"when": {"x_eq": "\ud800"}, "decision": "allow"}
        with pytest.raises(PolicyError, match="lone surrogate") as caught:
            Policy.from_document(
                {"schema": POLICY_SCHEMA, "actions": {"a": {"rules": [rule]}}}, source="p.yaml"
            )
        assert caught.value.path == "p.yaml"

    def test_the_kernel_module_imports_no_parser(self) -> None:
        """Importing the policy model loads no yaml, click or psycopg (sqlite3 arrives with the
        package root's default store, which is the standard library's)."""
        code = (
            "import sys, ctrlrun.kernel.policy\n"
            "bad = {'yaml', 'click', 'psycopg'} & set(sys.modules)\n"
            "assert not bad, bad\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True)
