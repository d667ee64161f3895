"""Properties of the policy loader and evaluator, over generated inputs (Hypothesis)."""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ctrlrun import Action, PolicyError, Principal
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.policy import (
    POLICY_SCHEMA,
    Condition,
    Decision,
    Evaluation,
    Op,
    Policy,
    Reason,
)

SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(SLOW, max_examples=300)

ARGUMENTS = ["amount", "currency", "live", "note", "payment_id", "n_items"]
DECISIONS = [decision.value for decision in Decision]

# --- strategies ---------------------------------------------------------------------------

# Small integers and short texts, so that generated calls often meet generated conditions.
integers = st.integers(-5, 5) | st.integers(-(10**12), 10**12)
scalars = st.one_of(st.none(), st.booleans(), integers, st.text(max_size=6))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
action_names = st.from_regex(r"[a-z][a-z0-9_]{0,4}(\.[a-z][a-z0-9_-]{0,4}){0,2}", fullmatch=True)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@st.composite
def condition_values(draw: st.DrawFn, op: str) -> Any:
    if op in ("lt", "lte", "gt", "gte"):
        return draw(integers)
    if op == "in":
        return draw(st.lists(scalars, min_size=1, max_size=4, unique_by=_canonical))
    return draw(scalars)


@st.composite
def whens(draw: st.DrawFn) -> dict[str, Any]:
    pairs = draw(
        st.lists(
            st.tuples(st.sampled_from(ARGUMENTS), st.sampled_from([op.value for op in Op])),
            min_size=1,
            max_size=2,
            unique=True,
        )
    )
    return {f"{argument}_{op}": draw(condition_values(op)) for argument, op in pairs}


@st.composite
def entries(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if draw(st.booleans()):
        body["decision"] = draw(st.sampled_from(DECISIONS))
    else:
        rules = [
            {"when": draw(whens()), "decision": draw(st.sampled_from(DECISIONS))}
            for _ in range(draw(st.integers(1, 4)))
        ]
        if draw(st.booleans()):
            rules.append({"decision": draw(st.sampled_from(DECISIONS))})
        body["rules"] = rules
    optional = {
        "effect": st.sampled_from(["refund:{payment_id}", "ns:{resource}", "constant"]),
        "resource": st.sampled_from(["payment:{payment_id}", "items/{n_items}"]),
        "max_attempts": st.integers(1, 9),
        "description": st.text(max_size=10),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            body[key] = draw(strategy)
    return body


def documents(min_actions: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda actions: {"schema": POLICY_SCHEMA, "actions": actions},
        st.dictionaries(action_names, entries(), min_size=min_actions, max_size=4),
    )


class _Dumper(yaml.SafeDumper):
    """Writes a document as YAML without anchors (the loader refuses them)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _quoted(style: str) -> type[_Dumper]:
    """A dumper that quotes every string, so text such as ``1e3`` stays text."""

    class Quoting(_Dumper):
        pass

    def represent(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Quoting.add_representer(str, represent)
    return Quoting


def dump(document: Any, *, flow: bool | None = False, quote: str = "'") -> str:
    return yaml.dump(
        document, Dumper=_quoted(quote), sort_keys=False, default_flow_style=flow, width=60
    )


def shuffled(value: Any, rnd: random.Random, key: str = "") -> Any:
    """``value`` with every mapping's keys and every ``in`` list in a new order, and every
    description rewritten: none of those is a decision input."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {
            k: ("rewritten " + v if k == "description" else shuffled(v, rnd, k)) for k, v in items
        }
    if isinstance(value, list):
        items = [shuffled(item, rnd) for item in value]
        if key.endswith("_in"):
            rnd.shuffle(items)
        return items
    return value


# --- only PolicyError escapes -------------------------------------------------------------

YAMLISH = st.text(
    alphabet=st.sampled_from(list(":-[]{},&*!|>'\"#%@`?<=~ \n\t.0123456789eE_abdilnorswy")),
    max_size=80,
)
SNIPPETS = [
    ": ",
    "- ",
    "\n",
    "  ",
    "{",
    "}",
    "[",
    "]",
    "&a ",
    "*a",
    "!!set ",
    "<<: ",
    "1.5",
    "1e3",
    ".inf",
    "yes",
    "~",
    "'",
    '"',
    "#",
    "\t",
    "_eq",
    "_in",
    "_lte",
    "decision",
    "rules",
    "when",
    "allow",
    "deny",
    "0",
    "-1",
    "2024-01-01",
    "{resource}",
    "?",
    "---",
    "\x00",
    "\ufeff",
    "é",
    "9" * 40,
]

VALID = dump(
    {
        "schema": POLICY_SCHEMA,
        "actions": {
            "stripe.refund": {
                "effect": "refund:{payment_id}",
                "max_attempts": 3,
                "rules": [
                    {
                        "when": {"amount_lte": 5000, "currency_in": ["usd", "eur"]},
                        "decision": "allow",
                    },
                    {"decision": "approve"},
                ],
            },
            "ns.delete": {"decision": "deny", "description": "never"},
        },
    }
)


@st.composite
def mutated_texts(draw: st.DrawFn) -> str:
    text = draw(
        st.sampled_from([VALID, dump(json.loads(json.dumps(yaml.safe_load(VALID))), flow=True)])
    )
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        if action == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 8)) :]
        else:
            snippet = draw(st.sampled_from(SNIPPETS) | st.text(max_size=3))
            end = at + (len(snippet) if action == "replace" else 0)
            text = text[:at] + snippet + text[end:]
    return text


def loads_or_refuses(text: str) -> Policy | None:
    """Load ``text``; a ``PolicyError`` is an answer, any other exception fails the test."""
    refusal: PolicyError | None = None
    try:
        policy: Policy | None = load_policy_text(text)
    except PolicyError as error:
        refusal, policy = error, None
    event("loaded" if policy else "refused")
    if refusal is not None:
        assert refusal.message
        assert refusal.line is None or refusal.line >= 1
    return policy


@SLOW
@given(st.text(max_size=200))
def test_only_policy_error_escapes_on_arbitrary_text(text: str) -> None:
    """Any text at all loads or raises ``PolicyError``; nothing else escapes."""
    loads_or_refuses(text)


@MANY
@given(YAMLISH)
def test_only_policy_error_escapes_on_yaml_punctuation(text: str) -> None:
    """Text made of YAML's own punctuation loads or raises ``PolicyError``."""
    loads_or_refuses(text)


@MANY
@given(mutated_texts())
def test_only_policy_error_escapes_on_mutated_documents(text: str) -> None:
    """A valid policy with characters inserted, deleted or replaced loads or is refused."""
    loads_or_refuses(text)


def _replace_somewhere(value: Any, replacement: Any, rnd: random.Random) -> Any:
    """``value`` with one randomly chosen node (possibly the root) replaced."""
    if rnd.random() < 0.3 or not isinstance(value, dict | list) or not value:
        return replacement
    if isinstance(value, dict):
        key = rnd.choice(list(value))
        return {**value, key: _replace_somewhere(value[key], replacement, rnd)}
    index = rnd.randrange(len(value))
    return [*value[:index], _replace_somewhere(value[index], replacement, rnd), *value[index + 1 :]]


@SLOW
@given(
    documents(),
    st.one_of(json_values, st.floats(allow_nan=True), st.binary(max_size=3), st.just((1, 2))),
    st.randoms(use_true_random=False),
)
def test_only_policy_error_escapes_on_structurally_mutated_documents(
    document: dict[str, Any], replacement: Any, rnd: random.Random
) -> None:
    """Replacing any node of a valid document with any value loads or raises ``PolicyError``,
    both from YAML text and from the plain document itself."""
    mutated = _replace_somewhere(document, replacement, rnd)
    with contextlib.suppress(PolicyError):
        Policy.from_document(mutated)
    if not isinstance(replacement, tuple):  # YAML has no tuples; the plain path has them
        loads_or_refuses(yaml.dump(mutated, Dumper=_Dumper, sort_keys=False))


# --- the hash -----------------------------------------------------------------------------


@SLOW
@given(
    documents(),
    st.randoms(use_true_random=False),
    st.sampled_from([False, True, None]),
    st.sampled_from(["'", '"']),
)
def test_hash_is_invariant_under_reordering_and_reformatting(
    document: dict[str, Any], rnd: random.Random, flow: bool | None, quote: str
) -> None:
    """Key order, ``in`` order, layout, quoting, comments and descriptions leave the hash."""
    base = Policy.from_document(document)
    text = "# reordered\n" + dump(shuffled(document, rnd), flow=flow, quote=quote)
    assert load_policy_text(text).policy_hash == base.policy_hash
    assert Policy.from_document(base.to_document()).policy_hash == base.policy_hash


# --- evaluation ---------------------------------------------------------------------------


def _expected(policy: Policy, action: Action) -> Evaluation:
    """An independent statement of the evaluation rules, to check the real one against."""
    entry = policy.entry(action.name)
    if entry is None:
        return Evaluation(Decision.DENY, Reason.UNKNOWN_ACTION)
    if entry.decision is not None:
        return Evaluation(entry.decision, Reason.DECISION)
    for index, rule in enumerate(entry.rules):
        results = {
            condition.key: (
                condition.holds(action.argument(condition.argument))
                if action.has_argument(condition.argument)
                else None
            )
            for condition in rule.when
        }
        unevaluable = sorted(key for key, result in results.items() if result is None)
        if unevaluable:
            return Evaluation(Decision.DENY, Reason.CONDITION_UNEVALUABLE, index, unevaluable[0])
        if all(results.values()):
            return Evaluation(rule.decision, Reason.RULE, index)
    return Evaluation(Decision.DENY, Reason.NO_MATCHING_RULE)


def _candidates(condition: Condition) -> list[Any]:
    """Values on both sides of a condition's edge: its value(s) and each integer's neighbours."""
    values = list(condition.value) if condition.op is Op.IN else [condition.value]
    return [near for value in values for near in _near(value)]


def _near(value: Any) -> list[Any]:
    return [value - 1, value, value + 1] if type(value) is int else [value]


@st.composite
def calls(draw: st.DrawFn, policy: Policy) -> Action:
    """A call, nearly always to a named action, whose arguments are nearly always values on
    the edges of that action's own conditions; now and then absent or of any JSON type."""
    rare = st.integers(0, 9).map(lambda n: n == 9)
    names = list(policy.actions)
    name = draw(action_names) if draw(rare) else draw(st.sampled_from(names))
    entry = policy.entry(name)
    pools: dict[str, list[Any]] = {}
    for rule in entry.rules if entry else ():
        for condition in rule.when:
            pools.setdefault(condition.argument, []).extend(_candidates(condition))
    arguments = draw(st.dictionaries(st.text(max_size=4), json_values, max_size=2))
    for argument in ARGUMENTS:
        if draw(rare):
            continue
        pool = pools.get(argument)
        arguments[argument] = draw(json_values if not pool or draw(rare) else st.sampled_from(pool))
    return Action(name, arguments, Principal("bot"))


@MANY
@given(st.data(), documents(min_actions=1))
def test_evaluation_is_total_and_fail_closed(data: st.DataObject, document: dict[str, Any]) -> None:
    """Every call gets an ``Evaluation``, never an exception; it agrees with the rules as
    written, and anything but an explicit allow or approve is a deny."""
    policy = Policy.from_document(document)
    action = data.draw(calls(policy))
    evaluation = policy.evaluate(action)
    assert isinstance(evaluation, Evaluation)
    event(f"{evaluation.decision}: {evaluation.reason}")
    assert evaluation == _expected(policy, action)
    if evaluation.reason not in (Reason.DECISION, Reason.RULE):
        assert evaluation.decision is Decision.DENY
    assert (evaluation.deny_reason is None) == (evaluation.decision is not Decision.DENY)
    assert evaluation.label
    again = Policy.from_document(policy.to_document())
    assert again.evaluate(action) == evaluation
