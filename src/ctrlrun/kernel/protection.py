"""Does the policy fit a protected function? A pure check of names, templates and rules.

Run by ``ctrlrun check`` over every protected function of a module, and by ``Control`` the
first time it meets each one under each policy. A template or a rule condition that names an
argument the function does not have can never be evaluated as written: that is a mismatch,
and the call is refused with the whole list. An action the policy does not name, or whose
every call it denies, is reported by ``ctrlrun check``; at call time the policy denies it with
a receipt as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from ctrlrun.kernel.policy import Decision, Policy
from ctrlrun.kernel.policy_model import ActionPolicy
from ctrlrun.kernel.template import RESOURCE, Template


class FindingKind(StrEnum):
    """What ``plan_protection`` can find. Only ``MISSING_PARAMETER`` refuses a call."""

    UNKNOWN_ACTION = "unknown_action"
    MISSING_PARAMETER = "missing_parameter"
    ALWAYS_DENIED = "always_denied"
    KEY_TYPE = "key_type"
    """A key placeholder's type (``{p}`` text, ``{p:int}`` integer) disagrees with the
    parameter's annotation: every call would be refused (``ctrlrun check`` only)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One disagreement between a protected function and the policy."""

    kind: FindingKind
    action: str
    detail: str

    def __str__(self) -> str:
        return f"{self.action}: {self.detail}"


def plan_protection(
    policy: Policy,
    name: str,
    parameters: frozenset[str],
    *,
    effect: Template | None = None,
    resource: Template | None = None,
) -> tuple[Finding, ...]:
    """Every way ``policy`` does not fit action ``name`` protected on a function taking
    ``parameters`` (the action's own: excluded ones left out). ``effect`` and ``resource`` are
    the function's own templates, which replace the policy's. Empty when it fits."""
    entry = policy.entry(name)
    if entry is None:
        return (Finding(FindingKind.UNKNOWN_ACTION, name, "the policy does not name it"),)
    templates = (("effect", effect or entry.effect), ("resource", resource or entry.resource))
    found = [
        Finding(
            FindingKind.MISSING_PARAMETER,
            name,
            f"the {what} template {template.source!r} names {placeholder!r}, which the"
            " function has no parameter for",
        )
        for what, template in templates
        if template is not None
        for placeholder in template.placeholders
        if placeholder not in parameters and not (placeholder == RESOURCE and what == "effect")
    ]
    found += [
        Finding(
            FindingKind.MISSING_PARAMETER,
            name,
            f"rule {index + 1} tests {condition.key!r}, but the function has no parameter"
            f" {condition.argument!r}",
        )
        for index, rule in enumerate(entry.rules)
        for condition in rule.when
        if condition.argument not in parameters
    ]
    if entry.budget is not None and entry.budget.sum not in parameters:
        found.append(
            Finding(
                FindingKind.MISSING_PARAMETER,
                name,
                f"the budget sums {entry.budget.sum!r}, but the function has no parameter"
                f" {entry.budget.sum!r}",
            )
        )
    if _always_denied(entry):
        found.append(Finding(FindingKind.ALWAYS_DENIED, name, "the policy denies every call"))
    return tuple(found)


def plan_key_types(
    name: str, template: Template | None, annotations: Mapping[str, str]
) -> tuple[Finding, ...]:
    """``KEY_TYPE`` findings for ``template`` against the parameters annotated ``"int"`` or
    ``"str"`` in ``annotations`` (others are not judged): a ``{p}`` placeholder takes text
    and ``{p:int}`` an integer (decision 0026), so a mismatch refuses every call."""
    if template is None:
        return ()
    found = []
    for placeholder in dict.fromkeys(template.placeholders):
        wanted = "int" if placeholder in template.ints else "str"
        given = annotations.get(placeholder)
        if placeholder != RESOURCE and given in ("int", "str") and given != wanted:
            fix = f"{{{placeholder}:int}}" if given == "int" else f"{{{placeholder}}}"
            found.append(
                Finding(
                    FindingKind.KEY_TYPE,
                    name,
                    f"the effect template {template.source!r} keys {placeholder!r} as"
                    f" {'an integer' if wanted == 'int' else 'text'}, but the parameter is"
                    f" annotated {given}: every call would be refused; write {fix}",
                )
            )
    return tuple(found)


def _always_denied(entry: ActionPolicy) -> bool:
    rules = [rule.decision for rule in entry.rules]
    decisions = [entry.decision] if entry.decision is not None else rules
    return bool(decisions) and all(decision is Decision.DENY for decision in decisions)
