"""Argument vectors that land an action in a chosen rule of the operator's policy.

Rules are tried in order and the first whose conditions all hold decides; every condition of
every rule reached is evaluated, and one that cannot be evaluated (argument absent, wrong
type) denies the whole call. So to land in rule ``i`` a vector must make every condition of
rule ``i`` true, make at least one condition of each earlier rule false, and keep every
condition it reaches evaluable. Conditions test one argument each, so once the falsified
condition of each earlier rule is chosen, every argument is solved on its own, from
candidates derived from the conditions on it (their values, neighbours and same-typed
alternatives) plus the recognisable ``ctrlrun-verify-<argument>``. Arguments an effect or
resource template reads must render (a non-empty string or an integer).

Everything is deterministic: the same policy gives the same vectors. ``solve`` re-evaluates
what it builds and raises ``SynthesisError`` (verify's own bug, exit 3) if the policy decides
otherwise.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ctrlrun.canonical import canonical_text
from ctrlrun.errors import EffectKeyError
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.policy import ActionPolicy, Condition, Decision, Op, Policy, Reason
from ctrlrun.kernel.policy_model import NUMERIC_OPS
from ctrlrun.kernel.template import RESOURCE

PREFIX: Final = "ctrlrun-verify"
AGENT: Final = f"{PREFIX}-agent"
PRINCIPAL: Final = Principal(AGENT, f"{PREFIX}-user")
MAX_CHOICES: Final = 256
"""How many ways of falsifying the earlier rules are tried before a rule counts as
unreachable."""
SPREAD: Final = 64
"""How many alternative values per argument are tried when distinct vectors are wanted."""


class SynthesisError(Exception):
    """A vector verify built does not land where verify meant it to: a bug in verify."""


@dataclass(frozen=True, slots=True)
class Target:
    """A decision the policy can make: ``rule`` None for an entry-level ``decision``."""

    entry: ActionPolicy
    rule: int | None
    decision: Decision

    @property
    def label(self) -> str:
        """``name (rule[i]: approve)`` for reports."""
        where = "decision" if self.rule is None else f"rule[{self.rule}]"
        return f"{self.entry.name} ({where}: {self.decision})"


@dataclass(frozen=True, slots=True)
class Vector:
    """Arguments (and the resource) that land ``target``; ``effect_key`` as it renders."""

    target: Target
    arguments: Mapping[str, Any]
    resource: str | None
    effect_key: str | None = field(default=None)

    def action(self, extra: Mapping[str, Any] | None = None) -> Action:
        """A fresh ``Action`` for this vector by verify's principal (a new action id each
        time), with ``extra`` arguments added."""
        arguments = {**self.arguments, **(extra or {})}
        return Action(self.target.entry.name, arguments, PRINCIPAL, resource=self.resource)


def targets(policy: Policy, decisions: Iterable[Decision]) -> list[Target]:
    """Every (action, rule) deciding one of ``decisions``, sorted by action name, then rule."""
    wanted = set(decisions)
    found: list[Target] = []
    for name in sorted(policy.actions):
        entry = policy.actions[name]
        if entry.decision is not None:
            if entry.decision in wanted:
                found.append(Target(entry, None, entry.decision))
            continue
        found += [
            Target(entry, i, r.decision) for i, r in enumerate(entry.rules) if r.decision in wanted
        ]
    return found


def solve(policy: Policy, target: Target, pins: Mapping[str, Any] | None = None) -> Vector | None:
    """The first vector (deterministic) landing ``target``, honouring ``pins`` (argument →
    value); None if no candidate combination reaches it."""
    for arguments in _solutions(target, dict(pins or {})):
        vector = _vector(target, arguments)
        if vector is not None:
            _confirm(policy, vector)
            return vector
    return None


def variants(policy: Policy, target: Target, count: int, *, by: str = "effect_key") -> list[Vector]:
    """Up to ``count`` vectors landing ``target`` that differ in ``by``: ``effect_key`` (distinct
    keys) or ``action_hash`` (distinct actions). The first is ``solve``'s answer."""
    first = solve(policy, target)
    if first is None:
        return []
    found, seen = [first], {_identity(first, by)}
    for argument in _varying(target, first, by):
        for value in _spread(argument, target):
            vector = solve(policy, target, {argument: value})
            if vector is not None and _identity(vector, by) not in seen:
                seen.add(_identity(vector, by))
                found.append(vector)
                if len(found) == count:
                    return found
    return found


def _identity(vector: Vector, by: str) -> str:
    if by == "effect_key":
        return vector.effect_key or ""
    return canonical_text({"a": dict(vector.arguments), "r": vector.resource})


def _varying(target: Target, first: Vector, by: str) -> list[str]:
    keyed = _template_arguments(target.entry, effect_only=True)
    if by == "effect_key":
        return sorted(keyed)
    return sorted(set(first.arguments)) or []


# --- solving -------------------------------------------------------------------------------


def _reached(target: Target) -> tuple[list[list[Condition]], list[Condition]]:
    """The earlier rules' conditions (one must fail in each) and the target's (all hold)."""
    if target.rule is None:
        return [], []
    rules = target.entry.rules
    return [list(r.when) for r in rules[: target.rule]], list(rules[target.rule].when)


@dataclass(frozen=True, slots=True)
class _Constraints:
    """What one choice of falsified conditions asks of every argument."""

    reached: list[Condition]  # every condition evaluated: each must be evaluable
    hold: list[Condition]  # the target rule's: each must hold
    falsified: tuple[Condition, ...]  # one per earlier rule: each must not hold
    rendered: set[str]  # arguments a template renders: non-empty string or integer
    pins: dict[str, Any]


def _solutions(target: Target, pins: dict[str, Any]) -> Iterator[dict[str, Any]]:
    earlier, hold = _reached(target)
    rendered = _template_arguments(target.entry)
    reached = [c for rule in earlier for c in rule] + hold
    names = sorted({c.argument for c in reached} | rendered | set(pins))
    for falsified in itertools.islice(itertools.product(*earlier), MAX_CHOICES):
        constraints = _Constraints(reached, hold, falsified, rendered, pins)
        arguments: dict[str, Any] = {}
        for name in names:
            value = _pick(name, constraints)
            if value is _NONE:
                break
            arguments[name] = value
        else:
            yield arguments


_NONE: Final = object()


def _pick(name: str, k: _Constraints) -> Any:
    on_it = [c for c in k.reached if c.argument == name]
    candidates = [k.pins[name]] if name in k.pins else _candidates(name, on_it)
    for value in candidates:
        if name in k.rendered and not _renderable(value):
            continue
        if any(c.holds(value) is None for c in on_it):
            continue
        if all(c.holds(value) for c in k.hold if c.argument == name) and not any(
            c.holds(value) for c in k.falsified if c.argument == name
        ):
            return value
    return _NONE


def _renderable(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, str | int) and value != ""


def _candidates(name: str, conditions: list[Condition]) -> list[Any]:
    values: list[Any] = []
    for condition in conditions:
        values += _from_condition(name, condition)
    values += [f"{PREFIX}-{name}", 1]
    return _unique(values)


def _from_condition(name: str, condition: Condition) -> list[Any]:
    if condition.op in NUMERIC_OPS:
        n = condition.value
        return [n, n - 1, n + 1]
    members = list(condition.value) if condition.op is Op.IN else [condition.value]
    out: list[Any] = []
    for member in members:
        out += [member, _other(name, member)]
    return out


def _other(name: str, value: Any) -> Any:
    """A value of the same JSON type as ``value`` that differs from it."""
    if value is None:
        return f"{PREFIX}-{name}"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    other = f"{PREFIX}-{name}"
    return other if other != value else f"{other}-2"


def _spread(name: str, target: Target) -> list[Any]:
    """Alternative values for ``name`` when distinct vectors are wanted."""
    earlier, hold = _reached(target)
    on_it = [c for c in [*(c for r in earlier for c in r), *hold] if c.argument == name]
    values: list[Any] = []
    for condition in on_it:
        values += _from_condition(name, condition)
        if condition.op in NUMERIC_OPS:
            values += [condition.value + d for i in range(1, SPREAD) for d in (i, -i)]
    values += [f"{PREFIX}-{name}-{i}" for i in range(1, SPREAD)] + list(range(1, SPREAD))
    return _unique(values)


def _unique(values: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for value in values:
        text = canonical_text(value)
        if text not in seen:
            seen.add(text)
            out.append(value)
    return out


# --- templates and confirmation ------------------------------------------------------------


def _template_arguments(entry: ActionPolicy, *, effect_only: bool = False) -> set[str]:
    names: set[str] = set()
    templates = [entry.effect] if effect_only else [entry.effect, entry.resource]
    for template in templates:
        if template is not None:
            names |= {p for p in template.placeholders if p != RESOURCE}
    effect, resource = entry.effect, entry.resource
    if effect_only and effect and resource and RESOURCE in effect.placeholders:
        names |= set(resource.placeholders)
    return names


def _vector(target: Target, arguments: dict[str, Any]) -> Vector | None:
    entry = target.entry
    resource = None
    try:
        if entry.resource is not None:
            resource = entry.resource.render(arguments)
        elif entry.effect is not None and RESOURCE in entry.effect.placeholders:
            resource = f"{PREFIX}-resource"
        key = entry.effect.render(arguments, resource) if entry.effect is not None else None
    except EffectKeyError:
        return None
    return Vector(target, arguments, resource, key)


def _confirm(policy: Policy, vector: Vector) -> None:
    evaluation = policy.evaluate(vector.action())
    target = vector.target
    expected_reason = Reason.DECISION if target.rule is None else Reason.RULE
    got = (evaluation.decision, evaluation.reason, evaluation.rule)
    if got != (target.decision, expected_reason, target.rule):
        raise SynthesisError(
            f"verify built {dict(vector.arguments)} for {target.label}, but the policy decided"
            f" {evaluation.decision} ({evaluation.label})"
        )
