"""The policy: which actions may run, which need a human, which are refused (docs/policy.md).

Evaluation is pure and fail-closed. An action the policy does not name is denied; rules that
all miss deny; a condition that cannot be evaluated (its argument absent, a numeric test of a
non-integer, an equality across JSON types) denies the whole call at that rule rather than
being skipped, because skipping a deny rule could fall through to an allow. There is no
default-allow anywhere. Only the action's name and arguments are read, never the principal.

This module imports no parser: YAML is read by ``ctrlrun.config`` (``load_policy_text``,
``load_policy_file``), which validates the parsed document with ``Policy.from_document``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, TypeVar

from ctrlrun.canonical import digest
from ctrlrun.errors import DenyReason, InvalidArgument
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.notify import NotifyTarget
from ctrlrun.kernel.policy_document import LineMap, parse_policy_document, policy_error
from ctrlrun.kernel.policy_model import (
    POLICY_SCHEMA,
    ActionPolicy,
    Condition,
    ControlEntry,
    Decision,
    Mode,
    Op,
    Rule,
    check_mode,
)
from ctrlrun.kernel.signing import check_public_key

__all__ = [
    "POLICY_SCHEMA",
    "ActionPolicy",
    "Condition",
    "ControlEntry",
    "Decision",
    "Evaluation",
    "Mode",
    "Op",
    "Policy",
    "Reason",
    "Rule",
]


_T = TypeVar("_T")


class Reason(StrEnum):
    """Why an evaluation came out as it did (machine-readable, recorded on receipts)."""

    DECISION = "decision"
    RULE = "rule"
    UNKNOWN_ACTION = "unknown_action"
    NO_MATCHING_RULE = "no_matching_rule"
    CONDITION_UNEVALUABLE = "condition_unevaluable"


_RULE_REASONS: Final = frozenset({Reason.RULE, Reason.CONDITION_UNEVALUABLE})
_FAIL_CLOSED: Final = frozenset(
    {Reason.UNKNOWN_ACTION, Reason.NO_MATCHING_RULE, Reason.CONDITION_UNEVALUABLE}
)
_DENY_REASONS: Final = {
    Reason.DECISION: DenyReason.POLICY,
    Reason.RULE: DenyReason.POLICY,
    Reason.UNKNOWN_ACTION: DenyReason.UNKNOWN_ACTION,
    Reason.NO_MATCHING_RULE: DenyReason.NO_MATCHING_RULE,
    Reason.CONDITION_UNEVALUABLE: DenyReason.CONDITION_UNEVALUABLE,
}


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The policy's answer for one action.

    ``rule`` is the zero-based index of the deciding rule, set exactly when ``reason`` is
    ``rule`` or ``condition_unevaluable``; ``condition`` names the condition (``amount_lte``)
    that could not be evaluated. The three fail-closed reasons always come with ``deny``.
    ``controls`` are the control ids the decision was taken under: the entry's and, when a rule
    decided, that rule's (sorted, no repeats); receipts cite them.
    Raises ``InvalidArgument`` if constructed inconsistently.
    """

    decision: Decision
    reason: Reason
    rule: int | None = None
    condition: str | None = None
    controls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.rule is not None) != (self.reason in _RULE_REASONS):
            raise InvalidArgument(f"rule index {self.rule!r} does not fit reason {self.reason}")
        if self.reason in _FAIL_CLOSED and self.decision is not Decision.DENY:
            raise InvalidArgument(f"{self.reason} must deny, not {self.decision}")
        if (self.condition is not None) != (self.reason is Reason.CONDITION_UNEVALUABLE):
            raise InvalidArgument("condition is named exactly when it was unevaluable")

    @property
    def deny_reason(self) -> DenyReason | None:
        """The ``DenyReason`` for ``ActionDenied``; ``None`` unless the decision is ``deny``."""
        if self.decision is not Decision.DENY:
            return None
        return _DENY_REASONS[self.reason]

    @property
    def label(self) -> str:
        """What receipts record: ``decision``, ``rule[2]``, ``unknown_action``, ...

        An unevaluable condition reads ``condition_unevaluable:rule[2].amount_lte``.
        """
        if self.reason is Reason.RULE:
            return f"rule[{self.rule}]"
        if self.reason is Reason.CONDITION_UNEVALUABLE:
            return f"{self.reason}:rule[{self.rule}].{self.condition}"
        return str(self.reason)


def _cited(entry: ActionPolicy, rule: Rule) -> tuple[str, ...]:
    if not rule.controls:
        return entry.controls
    return tuple(sorted({*entry.controls, *rule.controls}))


def _evaluate_rules(entry: ActionPolicy, action: Action) -> Evaluation:
    for index, rule in enumerate(entry.rules):
        matched = True
        # Every condition of a reached rule is evaluated, with no short cut: whether a call is
        # refused as unevaluable must not depend on the order its conditions were written in.
        for condition in rule.when:
            holds = _holds(condition, action)
            if holds is None:
                return Evaluation(
                    Decision.DENY,
                    Reason.CONDITION_UNEVALUABLE,
                    index,
                    condition.key,
                    _cited(entry, rule),
                )
            matched = matched and holds
        if matched:
            return Evaluation(rule.decision, Reason.RULE, index, controls=_cited(entry, rule))
    return Evaluation(Decision.DENY, Reason.NO_MATCHING_RULE, controls=entry.controls)


def _holds(condition: Condition, action: Action) -> bool | None:
    if not action.has_argument(condition.argument):
        return None
    return condition.holds(action.argument(condition.argument))


def _by_name(
    items: Iterable[_T], kind: type[_T], name: Callable[[_T], str], what: str
) -> dict[str, _T]:
    """``items`` by name; ``InvalidArgument`` for a member of another type or a name twice."""
    table: dict[str, _T] = {}
    for item in items:
        if not isinstance(item, kind):
            article = "an" if kind.__name__[0] in "AEIOU" else "a"
            raise InvalidArgument(f"expected {article} {kind.__name__}, got {item!r}")
        if name(item) in table:
            raise InvalidArgument(f"{what} {name(item)!r} is given twice")
        table[name(item)] = item
    return table


def _check_cited(entry: ActionPolicy, registry: Mapping[str, ControlEntry]) -> None:
    cited = [*entry.controls, *(c for rule in entry.rules for c in rule.controls)]
    unknown = sorted({c for c in cited if c not in registry})
    if unknown:
        raise InvalidArgument(
            f"{entry.name}: cites control(s) {', '.join(unknown)} that the policy's 'controls'"
            " section does not define"
        )


class Policy:
    """A validated, immutable set of action entries, and the hash of its decision inputs.

    ``policy_hash`` is ``sha256:<hex>`` of ``to_document()``: the decisions, rules, templates,
    ``max_attempts`` and the controls cited and defined, not the file's bytes, so formatting,
    comments, key order and the order of ``in`` members do not change it, and descriptions are
    not part of it. A policy that cites no control hashes as it did before controls existed.
    """

    __slots__ = (
        "_actions",
        "_approvers",
        "_controls",
        "_decided",
        "_hash",
        "_mode",
        "_notify",
        "_source",
    )

    def __init__(
        self,
        actions: Iterable[ActionPolicy],
        *,
        source: str | None = None,
        controls: Iterable[ControlEntry] = (),
        approvers: Mapping[str, str] | None = None,
        notify: Iterable[NotifyTarget] = (),
        mode: Mode = Mode.ENFORCE,
    ) -> None:
        """Raises ``InvalidArgument`` for a member that is not an ``ActionPolicy``, a name
        given twice, a control given twice, an entry or rule citing a control that
        ``controls`` does not define, or a ``mode`` that is not a ``Mode``."""
        self._mode = check_mode(mode)
        table = _by_name(actions, ActionPolicy, lambda entry: entry.name, "action")
        registry = _by_name(controls, ControlEntry, lambda c: c.control_id, "control")
        self._actions: Mapping[str, ActionPolicy] = MappingProxyType(table)
        self._controls: Mapping[str, ControlEntry] = MappingProxyType(
            dict(sorted(registry.items()))
        )
        for entry in table.values():
            _check_cited(entry, self._controls)
        # An entry-level decision is the same answer for every call: built once, shared
        # (an Evaluation is immutable).
        self._decided = {
            name: Evaluation(entry.decision, Reason.DECISION, controls=entry.controls)
            for name, entry in table.items()
            if entry.decision is not None
        }
        self._approvers: Mapping[str, str] = MappingProxyType(
            {name: check_public_key(key) for name, key in sorted((approvers or {}).items())}
        )
        self._notify = tuple(notify)  # who is told of a new request: not a decision input
        self._source = source
        self._hash = digest(self.to_document())

    @property
    def schema(self) -> str:
        """The policy schema: always ``ctrlrun.policy/v1``."""
        return POLICY_SCHEMA

    @property
    def actions(self) -> Mapping[str, ActionPolicy]:
        """The entries by action name (a read-only view)."""
        return self._actions

    @property
    def policy_hash(self) -> str:
        """``sha256:<hex>`` of the canonical decision inputs."""
        return self._hash

    @property
    def source(self) -> str | None:
        """Where the policy was loaded from, if it was; not a decision input."""
        return self._source

    @property
    def controls(self) -> Mapping[str, ControlEntry]:
        """The written controls the policy cites, by id (a read-only view)."""
        return self._controls

    @property
    def approvers(self) -> Mapping[str, str]:
        """The approvers whose signed grants alone count, with their public keys
        (``ed25519:…``), by name; empty when grants are not signed (a read-only view)."""
        return self._approvers

    @property
    def notify(self) -> tuple[NotifyTarget, ...]:
        """The webhook targets told of each new approval request (not part of the hash)."""
        return self._notify

    @property
    def mode(self) -> Mode:
        """The policy's own mode: what an action without a ``mode`` of its own gets."""
        return self._mode

    def observes(self, name: str) -> bool:
        """Whether calls of ``name`` are only observed: the action's ``mode``, else the
        policy's (an action the policy does not name too)."""
        entry = self._actions.get(name)
        mode = entry.mode if entry is not None and entry.mode is not None else self._mode
        return mode is Mode.OBSERVE

    def entry(self, name: str) -> ActionPolicy | None:
        """The entry for the action ``name``, or ``None`` if the policy does not name it."""
        return self._actions.get(name)

    def evaluate(self, action: Action) -> Evaluation:
        """Decide ``action``: always an ``Evaluation``, never an exception, never default-allow.

        Unknown name → deny ``unknown_action``; an entry-level decision → it, ``decision``;
        otherwise the first rule whose conditions all hold → its decision, ``rule``; none →
        deny ``no_matching_rule``; a condition that cannot be evaluated in a rule reached
        before a match → deny ``condition_unevaluable`` with that rule's index.
        """
        decided = self._decided.get(action.name)
        if decided is not None:
            return decided
        entry = self._actions.get(action.name)
        if entry is None:
            return Evaluation(Decision.DENY, Reason.UNKNOWN_ACTION)
        return _evaluate_rules(entry, action)

    def to_document(self) -> dict[str, Any]:
        """The canonical decision inputs as plain data (a fresh copy; the hash covers it).

        ``Policy.from_document(p.to_document())`` has the same hash and decides the same.
        """
        document: dict[str, Any] = {
            "schema": POLICY_SCHEMA,
            "actions": {name: entry.to_document() for name, entry in self._actions.items()},
        }
        if self._controls:
            document["controls"] = {cid: c.to_document() for cid, c in self._controls.items()}
        if self._approvers:
            document["approvers"] = {name: {"key": key} for name, key in self._approvers.items()}
        if self._mode is not Mode.ENFORCE:
            document["mode"] = self._mode.value
        return document

    @classmethod
    def from_document(
        cls, data: object, *, lines: LineMap | None = None, source: str | None = None
    ) -> Policy:
        """Validate a parsed document (plain mappings, lists, scalars) into a ``Policy``.

        ``lines`` maps key paths (``("actions", "a.b", "rules", 0)``) to 1-based lines so
        errors can name them; ``source`` becomes ``PolicyError.path``. Raises ``PolicyError``
        and nothing else.
        """
        entries, controls, approvers, notify, mode = parse_policy_document(
            data, lines=lines, source=source
        )
        try:
            return cls(
                entries,
                source=source,
                controls=controls,
                approvers=approvers,
                notify=notify,
                mode=mode,
            )
        except InvalidArgument as error:  # text with no canonical form (a lone surrogate)
            raise policy_error(error.message, source=source) from error

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and other._hash == self._hash

    def __hash__(self) -> int:
        return hash(self._hash)

    def __repr__(self) -> str:
        return f"Policy({len(self._actions)} actions, {self._hash[:15]}…)"
