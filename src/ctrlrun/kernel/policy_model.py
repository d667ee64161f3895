"""The typed values a policy is made of: decisions, conditions, rules and action entries.

Every value validates itself at construction and raises ``InvalidArgument`` when it could not
be evaluated safely, so a ``Policy`` built in Python is held to the same rules as one loaded
from ``ctrlrun.yaml`` (docs/policy.md). Nothing here does I/O or imports a parser.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from ctrlrun.canonical import canonical_text
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.action import check_action_name
from ctrlrun.kernel.approval_rules import DEFAULT_RULES, ApprovalRules, render_duration
from ctrlrun.kernel.argument_display import Money, shown_value
from ctrlrun.kernel.budget import Budget
from ctrlrun.kernel.template import RESOURCE, Template

POLICY_SCHEMA: Final = "ctrlrun.policy/v1"
"""The one policy schema this version reads. There is no ladder of versions."""


class Decision(StrEnum):
    """What the policy says about an action."""

    ALLOW = "allow"
    APPROVE = "approve"
    DENY = "deny"


class Mode(StrEnum):
    """Whether the policy's answer is enforced, or only recorded beside a call that runs."""

    ENFORCE = "enforce"
    OBSERVE = "observe"


def check_mode(value: object) -> Mode:
    """``value`` as a ``Mode``; ``InvalidArgument`` naming the two it takes otherwise."""
    if isinstance(value, str) and value in set(Mode):
        return Mode(value)
    raise InvalidArgument(f"mode must be 'enforce' or 'observe', got {value!r}")


class Op(StrEnum):
    """A condition's comparison. The numeric four compare integers only."""

    EQ = "eq"
    NEQ = "neq"
    IN = "in"
    LT = "lt"
    LTE = "lte"
    GT = "gt"
    GTE = "gte"


_OP_NAMES: Final = frozenset(op.value for op in Op)
NUMERIC_OPS: Final = frozenset({Op.LT, Op.LTE, Op.GT, Op.GTE})

_COMPARE: Final[dict[Op, Callable[[int, int], bool]]] = {
    Op.LT: operator.lt,
    Op.LTE: operator.le,
    Op.GT: operator.gt,
    Op.GTE: operator.ge,
}

RESERVED_ARGUMENTS: Final = frozenset(
    {
        "action_id",
        "agent",
        "claims",
        "data_scope",
        "environment",
        "expires_at",
        "issuer",
        "principal",
        "resource",
        "user",
    }
)
"""Names a condition may not test. Conditions read arguments only, so ``user_eq: alice`` would
read an argument the caller chose, not who is calling: an identity check that is not one."""

_SCALARS: Final = (str, int, bool, type(None))
FLOAT_HINT: Final = "floats are refused: write amounts as integer minor units (e.g. cents)"


def json_type(value: object) -> str:
    """The JSON type name of a plain value (``bool`` is ``boolean``, never ``integer``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, str):
        return "string"
    if isinstance(value, float):
        return "float"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def _same(left: object, right: object) -> bool:
    """JSON-strict scalar equality: ``True != 1`` and ``1 != "1"``."""
    return type(left) is type(right) and left == right


def _comparable(argument: object, expected: object) -> bool:
    """Whether ``argument`` may be tested against ``expected`` by equality.

    A ``null`` in the policy is an explicit test for null and compares with anything; otherwise
    both sides must have the same JSON type, or the comparison means nothing.
    """
    return expected is None or type(argument) is type(expected)


def _check_scalar(value: object, what: str) -> None:
    if isinstance(value, float):
        raise InvalidArgument(f"{what} is a float ({value!r}): {FLOAT_HINT}")
    if type(value) not in _SCALARS:
        raise InvalidArgument(
            f"{what} must be a string, an integer, a boolean or null, got {json_type(value)}"
        )


def _check_value(op: Op, value: object) -> None:
    """Raise ``InvalidArgument`` unless ``value`` is the right shape for ``op``."""
    if isinstance(value, float):
        raise InvalidArgument(f"the value is a float ({value!r}): {FLOAT_HINT}")
    if op in NUMERIC_OPS:
        if type(value) is not int:
            raise InvalidArgument(
                f"'{op}' compares integers only; the value must be an integer, got"
                f" {json_type(value)}"
            )
    elif op is Op.IN:
        if not isinstance(value, tuple):
            raise InvalidArgument(f"'in' takes a list of scalars, got {json_type(value)}")
        if not value:
            raise InvalidArgument("'in' takes a non-empty list: an empty one can never match")
        seen: set[str] = set()
        for index, member in enumerate(value):
            _check_scalar(member, f"member [{index}]")
            text = canonical_text(member)
            if text in seen:
                raise InvalidArgument(f"member [{index}] ({text}) is listed twice")
            seen.add(text)
    else:
        _check_scalar(value, "the value")


@dataclass(frozen=True, slots=True)
class Condition:
    """One test of one argument: ``amount_lte: 5000`` is ``Condition("amount", Op.LTE, 5000)``.

    ``value`` is a ``str``, ``int``, ``bool`` or ``None`` for ``eq``/``neq``; a non-empty tuple
    of such scalars, without repeats, for ``in``; an ``int`` that is not a ``bool`` for the
    numeric operators. Raises ``InvalidArgument`` otherwise, for an empty argument name, and for
    a name in ``RESERVED_ARGUMENTS``.
    """

    argument: str
    op: Op
    value: Any

    def __post_init__(self) -> None:
        if not isinstance(self.argument, str) or not self.argument:
            raise InvalidArgument(f"a condition needs an argument name, got {self.argument!r}")
        if self.argument in RESERVED_ARGUMENTS:
            raise InvalidArgument(
                f"{self.argument!r} cannot be tested: conditions read the action's arguments"
                " only, so this would test a value the caller chose, not who is asking"
            )
        if not isinstance(self.op, Op):
            raise InvalidArgument(f"op must be an Op, got {self.op!r}")
        _check_value(self.op, self.value)

    @classmethod
    def parse(cls, key: str, value: object) -> Condition:
        """The condition written ``<argument>_<op>: value``, split at the last underscore.

        ``payment_amount_gte`` is the argument ``payment_amount`` with ``gte``. A list value is
        accepted for ``in``. Raises ``InvalidArgument`` for a key without a known operator.
        """
        argument, underscore, suffix = key.rpartition("_")
        if not underscore or not argument or suffix not in _OP_NAMES:
            ops = ", ".join(op.value for op in Op)
            raise InvalidArgument(
                f"{key!r} is not a condition: write <argument>_<op> with op one of {ops}"
            )
        if isinstance(value, list):
            value = tuple(value)
        return cls(argument, Op(suffix), value)

    @property
    def key(self) -> str:
        """How the condition is written in a policy file: ``<argument>_<op>``."""
        return f"{self.argument}_{self.op.value}"

    def holds(self, value: object) -> bool | None:
        """Whether the argument's ``value`` satisfies the condition; ``None`` if it cannot tell.

        ``None`` (unevaluable) for a numeric test of anything but an ``int`` (``bool`` is not an
        ``int`` here), and for an equality or ``in`` test across different JSON types. A null
        written in the policy is an explicit null test and compares with any value; a null
        argument tested against a string, number or boolean is unevaluable.
        """
        if self.op in NUMERIC_OPS:
            if type(value) is not int:
                return None
            return _COMPARE[self.op](value, self.value)
        if self.op is Op.IN:
            if not any(_comparable(value, member) for member in self.value):
                return None
            return any(_same(value, member) for member in self.value)
        if not _comparable(value, self.value):
            return None
        equal = _same(value, self.value)
        return equal if self.op is Op.EQ else not equal

    def to_value(self) -> Any:
        """The value as the canonical document holds it (``in`` members in canonical order)."""
        if self.op is Op.IN:
            return sorted(self.value, key=canonical_text)
        return self.value


@dataclass(frozen=True, slots=True)
class Rule:
    """``decision`` applies when every condition in ``when`` holds; no conditions: always.

    ``when`` is kept sorted by condition key, whatever order it was given in. ``controls`` are
    the ids of the written controls a decision by this rule is taken under (kept sorted).

    Raises ``InvalidArgument`` for a decision that is not a ``Decision``, a member of ``when``
    that is not a ``Condition``, or the same ``<argument>_<op>`` twice.
    """

    when: tuple[Condition, ...]
    decision: Decision
    controls: tuple[str, ...] = ()
    approval: ApprovalRules | None = None  # this rule's approval, in place of the action's

    def __post_init__(self) -> None:
        if not isinstance(self.decision, Decision):
            raise InvalidArgument(f"decision must be a Decision, got {self.decision!r}")
        if self.approval is not None and (
            not isinstance(self.approval, ApprovalRules) or self.decision is not Decision.APPROVE
        ):
            raise InvalidArgument("only a rule that decides approve takes ApprovalRules")
        object.__setattr__(self, "controls", check_control_ids(self.controls))
        if not isinstance(self.when, tuple) or not all(
            isinstance(item, Condition) for item in self.when
        ):
            raise InvalidArgument("when must be a tuple of Conditions")
        keys = [condition.key for condition in self.when]
        if len(set(keys)) != len(keys):
            raise InvalidArgument(f"a condition is repeated in {keys}")
        # A `when` is a mapping: the order its keys were written in means nothing, so the
        # conditions are held in key order and equal rules compare equal.
        object.__setattr__(self, "when", tuple(sorted(self.when, key=lambda c: c.key)))

    def to_document(self) -> dict[str, Any]:
        """The rule as plain data; ``when`` is left out when there are no conditions."""
        out: dict[str, Any] = {"decision": self.decision.value}
        if self.when:
            out["when"] = {condition.key: condition.to_value() for condition in self.when}
        if self.controls:
            out["controls"] = list(self.controls)
        if self.approval is not None:
            out["approval"] = self.approval.to_document()
        return out


def describe_rule(
    rule: Rule, displays: Mapping[str, Money] | None = None, approval: ApprovalRules | None = None
) -> str:
    """The rule as a person reads it: ``when amount_lte €10,000.00 (1000000): approve (2
    approvers, 2h)``; a money argument (``displays``) is shown as ``format_money`` writes it."""
    tests = []
    for condition in rule.when:
        money = (displays or {}).get(condition.argument)
        value = condition.to_value()
        text = shown_value(value, money) if money is not None else None
        tests.append(f"{condition.key} {text or canonical_text(value)}")
    said = f"when {', '.join(tests)}: " if tests else "always: "
    said += str(rule.decision)
    rules = approval if approval is not None else rule.approval
    if rule.decision is Decision.APPROVE and rules is not None:
        people = "approver" if rules.count == 1 else "approvers"
        said += f" ({rules.count} {people}" + (
            f", {render_duration(rules.ttl)})" if rules.ttl else ")"
        )
    return said


def first_unreachable(rules: tuple[Rule, ...]) -> int | None:
    """The index of the first rule that follows an unconditional one (it can never match)."""
    for index, rule in enumerate(rules[:-1]):
        if not rule.when:
            return index + 1
    return None


def check_max_attempts(value: object) -> int | None:
    """``value`` if it is ``None`` or an ``int`` ≥ 1 that is not a ``bool``; else raise."""
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise InvalidArgument(f"max_attempts must be an integer >= 1, got {value!r}")
    return value


def check_resource_template(template: Template | None) -> Template | None:
    """``template`` unless it uses ``{resource}``: the resource cannot be made from itself."""
    if template is not None and RESOURCE in template.placeholders:
        raise InvalidArgument(
            f"resource template {template.source!r} uses {{resource}}: a resource cannot be"
            " built from itself"
        )
    return template


@dataclass(frozen=True, slots=True)
class ActionPolicy:
    """What the policy says about one action name.

    Exactly one of ``decision`` (applies to every call) and ``rules`` (tried in order, the first
    match decides). ``effect`` and ``resource`` are templates resolved per call elsewhere;
    ``max_attempts`` bounds the attempts on one effect key. ``controls`` are the ids of the
    written controls every decision on this action is taken under. ``description`` is for people
    and is not a decision input. Raises ``InvalidArgument`` for a bad name, both or neither of
    ``decision``/``rules``, a rule after an unconditional one (unreachable), a ``{resource}``
    inside ``resource``, or ``max_attempts`` below 1. ``mode`` (None: the policy's) says
    whether the answer is enforced or only observed (docs/rollout.md).
    """

    name: str
    decision: Decision | None = None
    rules: tuple[Rule, ...] = ()
    effect: Template | None = None
    resource: Template | None = None
    max_attempts: int | None = None
    description: str | None = None
    controls: tuple[str, ...] = ()
    approval: ApprovalRules = DEFAULT_RULES
    display: tuple[tuple[str, Money], ...] = ()  # how arguments are shown: not hashed
    mode: Mode | None = None
    budget: Budget | None = None  # a cumulative limit (kernel/budget.py)

    def __post_init__(self) -> None:
        check_action_name(self.name)
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise InvalidArgument(f"budget must be a Budget, got {self.budget!r}")
        if self.mode is not None:
            object.__setattr__(self, "mode", check_mode(self.mode))
        if not all(isinstance(m, Money) for _, m in self.display):
            raise InvalidArgument("display must pair argument names with Money")
        if not isinstance(self.approval, ApprovalRules):
            raise InvalidArgument(f"approval must be ApprovalRules, got {self.approval!r}")
        object.__setattr__(self, "controls", check_control_ids(self.controls))
        if (self.decision is None) == (not self.rules):
            raise InvalidArgument(
                f"{self.name}: give exactly one of decision and rules"
                + (", not both" if self.rules else "")
            )
        if self.decision is not None and not isinstance(self.decision, Decision):
            raise InvalidArgument(f"decision must be a Decision, got {self.decision!r}")
        if not isinstance(self.rules, tuple) or not all(
            isinstance(rule, Rule) for rule in self.rules
        ):
            raise InvalidArgument("rules must be a tuple of Rules")
        unreachable = first_unreachable(self.rules)
        if unreachable is not None:
            raise InvalidArgument(
                f"rule [{unreachable}] can never match: rule [{unreachable - 1}] has no"
                " conditions and always matches"
            )
        for template in (self.effect, self.resource):
            if template is not None and not isinstance(template, Template):
                raise InvalidArgument(f"templates must be parsed Templates, got {template!r}")
        check_resource_template(self.resource)
        check_max_attempts(self.max_attempts)
        if self.description is not None and not isinstance(self.description, str):
            raise InvalidArgument(f"description must be a string, got {self.description!r}")

    def to_document(self) -> dict[str, Any]:
        """The entry's decision inputs as plain data (no ``description``, no absent keys)."""
        out: dict[str, Any] = {}
        if self.decision is not None:
            out["decision"] = self.decision.value
        else:
            out["rules"] = [rule.to_document() for rule in self.rules]
        if self.effect is not None:
            out["effect"] = self.effect.source
        if self.resource is not None:
            out["resource"] = self.resource.source
        if self.max_attempts is not None:
            out["max_attempts"] = self.max_attempts
        if self.controls:
            out["controls"] = list(self.controls)
        if self.approval.to_document():
            out["approval"] = self.approval.to_document()
        if self.mode is not None:
            out["mode"] = self.mode.value
        if self.budget is not None:
            out["budget"] = self.budget.to_document()
        return out

    def approval_for(self, rule: int | None) -> ApprovalRules:
        """How a call decided by rule ``rule`` (None: by the entry) must be approved: that
        rule's ``approval`` when it has one, else the entry's."""
        if rule is not None and 0 <= rule < len(self.rules):
            own = self.rules[rule].approval
            if own is not None:
                return own
        return self.approval

    @property
    def displays(self) -> dict[str, Money]:
        """``display`` as a mapping: argument name → how it is shown."""
        return dict(self.display)


CONTROL_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}")
"""A control id: what an organisation calls a written expectation (``FIN-7``, ``SOC2:CC6.1``)."""


def check_control_ids(value: object) -> tuple[str, ...]:
    """``value`` (a list or tuple of control ids) sorted, as a tuple; else raise.

    Raises ``InvalidArgument`` for a non-sequence, an id that is not a ``CONTROL_ID``, or an id
    given twice (a slip, never a weight).
    """
    if not isinstance(value, list | tuple):
        raise InvalidArgument(f"controls must be a list of control ids, got {json_type(value)}")
    for item in value:
        if not isinstance(item, str) or not CONTROL_ID.fullmatch(item):
            raise InvalidArgument(
                f"control id {item!r} must be 1-64 letters, digits or ._:/- (starting with a"
                " letter or digit)"
            )
    if len(set(value)) != len(value):
        raise InvalidArgument(f"a control id is repeated in {list(value)}")
    return tuple(sorted(value))


@dataclass(frozen=True, slots=True)
class ControlEntry:
    """One written control the policy cites: its id, a title for people, and where it is
    written down (``source``, quoted on nothing, never interpreted). Raises ``InvalidArgument``
    for a bad id or an empty or non-string title or source."""

    control_id: str
    title: str
    source: str | None = None

    def __post_init__(self) -> None:
        check_control_ids([self.control_id])
        if not isinstance(self.title, str) or not self.title.strip():
            raise InvalidArgument(f"control {self.control_id}: title must be non-empty text")
        if self.source is not None and (not isinstance(self.source, str) or not self.source):
            raise InvalidArgument(f"control {self.control_id}: source must be non-empty text")

    def to_document(self) -> dict[str, Any]:
        """The entry as plain data (``source`` left out when absent)."""
        out = {"title": self.title}
        if self.source is not None:
            out["source"] = self.source
        return out
