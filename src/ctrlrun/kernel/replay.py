"""Replaying recorded calls under a candidate policy: what would change, decided purely.

A receipt holds everything the policy decided on: the action's name, canonical arguments,
principal, resource and environment, and the decision and rule it met. ``replay_receipt``
rebuilds that action, evaluates it under the candidate policy, renders its effect key under the
candidate's template, and says how the outcome would differ. ``ReplayTally`` folds any number of
replayed calls into per-(action, rule) counts with a few example action ids each, so a replay
over millions of receipts holds only the tallies (``ctrlrun policy replay``, docs/rollout.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from ctrlrun.errors import EffectKeyError, InvalidArgument
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.policy import Decision, Policy

EXAMPLES: Final = 3
"""How many example action ids a tally keeps per group and change."""

EFFECT_KEY_ERROR: Final = "effect_key_error"
UNREPLAYABLE: Final = "unreplayable"


class Change(StrEnum):
    """How a recorded call would fare under the candidate, by the candidate's decision."""

    UNCHANGED = "unchanged"
    NOW_DENIED = "now_denied"
    NOW_NEEDS_PERSON = "now_needs_person"
    NOW_RUNS = "now_runs"
    UNREPLAYABLE = "unreplayable"


_BY_NEW_DECISION: Final = {
    Decision.DENY: Change.NOW_DENIED,
    Decision.APPROVE: Change.NOW_NEEDS_PERSON,
    Decision.ALLOW: Change.NOW_RUNS,
}


@dataclass(frozen=True, slots=True)
class ReplayedCall:
    """One recorded call under the candidate. ``old_*`` are as recorded; ``new_*`` the
    candidate's answer (``new_rule`` is the receipt-style label: ``rule[1]``, ``decision``,
    ``no_matching_rule``, ``effect_key_error`` …). ``key_changed``: the call passed the policy
    then and would now, and the effect key it reserves differs (or one side has none).
    ``template_refused``: the candidate renders this action's keys from another template than
    the store remembers, so the call would be refused with ``EffectTemplateChanged`` until an
    operator accepts the change."""

    action_id: str
    action: str
    old_decision: str
    old_rule: str
    new_decision: str
    new_rule: str
    change: Change
    old_key: str | None
    new_key: str | None
    template_refused: bool

    @property
    def key_changed(self) -> bool:
        """Both policies let the call through, under different effect keys."""
        passed = Decision.DENY not in (self.old_decision, self.new_decision)
        return passed and self.change is not Change.UNREPLAYABLE and self.old_key != self.new_key


def replay_receipt(
    document: Mapping[str, Any], candidate: Policy, remembered: Mapping[str, str]
) -> ReplayedCall:
    """``document`` (a receipt's parsed document) replayed under ``candidate``.

    ``remembered`` maps an action name to the effect-key template the store reserves its keys
    under. A receipt whose action cannot be rebuilt (a name, argument or principal the kernel
    refuses today) is ``UNREPLAYABLE``, never an exception."""
    old_decision = str(document.get("decision") or "")
    old_rule = str(document.get("decision_reason") or "")
    action_id = str(document.get("action_id") or "")
    name = str(document.get("action") or "")
    old_key = document.get("effect_key")
    try:
        action = _rebuild(document)
    except (InvalidArgument, TypeError, ValueError):
        return ReplayedCall(
            action_id, name, old_decision, old_rule, "", UNREPLAYABLE,
            Change.UNREPLAYABLE, old_key, None, False,
        )  # fmt: skip
    evaluation = candidate.evaluate(action)
    decision, rule = evaluation.decision, evaluation.label
    entry = candidate.entry(name)
    new_key, refused = None, False
    if entry is not None and entry.effect is not None and decision is not Decision.DENY:
        try:
            new_key = entry.effect.render(action.plain_arguments, action.resource)
        except EffectKeyError:
            decision, rule = Decision.DENY, EFFECT_KEY_ERROR
        else:
            known = remembered.get(name)
            refused = known is not None and known != entry.effect.shape  # decision 0026
    change = Change.UNCHANGED if str(decision) == old_decision else _BY_NEW_DECISION[decision]
    return ReplayedCall(
        action_id, name, old_decision, old_rule, str(decision), rule,
        change, old_key, new_key, refused,
    )  # fmt: skip


def _rebuild(document: Mapping[str, Any]) -> Action:
    principal = document.get("principal")
    if not isinstance(principal, Mapping):
        raise InvalidArgument("the receipt names no principal")
    arguments = document.get("arguments")
    if not isinstance(arguments, Mapping):
        raise InvalidArgument("the receipt holds no arguments")
    return Action(
        str(document.get("action")),
        arguments,
        Principal(str(principal.get("agent")), principal.get("user")),
        resource=document.get("resource"),
        environment=str(document.get("environment")),
    )


@dataclass(slots=True)
class ReplayGroup:
    """The calls of one action that met one recorded rule and now meet one candidate rule."""

    action: str
    old_rule: str
    new_rule: str
    old_decision: str
    new_decision: str
    calls: int = 0
    keys_changed: int = 0
    template_refused: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def change(self) -> Change:
        """The group's change (every call in a group shares both decisions)."""
        if self.new_rule == UNREPLAYABLE:
            return Change.UNREPLAYABLE
        if self.new_decision == self.old_decision:
            return Change.UNCHANGED
        return _BY_NEW_DECISION[Decision(self.new_decision)]

    def to_dict(self) -> dict[str, Any]:
        """The group as plain data (``--json``)."""
        return {
            "action": self.action,
            "old_decision": self.old_decision,
            "old_rule": self.old_rule,
            "new_decision": self.new_decision,
            "new_rule": self.new_rule,
            "change": str(self.change),
            "calls": self.calls,
            "keys_changed": self.keys_changed,
            "template_refused": self.template_refused,
            "examples": list(self.examples),
        }


@dataclass(slots=True)
class ReplayTally:
    """Counts of replayed calls, grouped by (action, old rule, new rule); memory grows with
    the number of distinct groups, never with the number of calls."""

    groups: dict[tuple[str, str, str], ReplayGroup] = field(default_factory=dict)
    calls: int = 0

    def add(self, call: ReplayedCall) -> None:
        """Count ``call`` in its group, keeping its id as an example while the group has few."""
        self.calls += 1
        key = (call.action, call.old_rule, call.new_rule)
        group = self.groups.get(key)
        if group is None:
            group = ReplayGroup(
                call.action, call.old_rule, call.new_rule, call.old_decision, call.new_decision
            )
            self.groups[key] = group
        group.calls += 1
        group.keys_changed += call.key_changed
        group.template_refused += call.template_refused
        if len(group.examples) < EXAMPLES and (
            call.change is not Change.UNCHANGED or call.key_changed or call.template_refused
        ):
            group.examples.append(call.action_id)

    def ordered(self) -> list[ReplayGroup]:
        """The groups, changed ones first, then by action and rule."""
        return sorted(
            self.groups.values(),
            key=lambda g: (g.change is Change.UNCHANGED, g.action, g.old_rule, g.new_rule),
        )

    def totals(self) -> dict[str, int]:
        """Calls per change, plus the calls whose key would change or be refused."""
        out = {str(change): 0 for change in Change}
        keys = refused = 0
        for group in self.groups.values():
            out[str(group.change)] += group.calls
            keys += group.keys_changed
            refused += group.template_refused
        return {"calls": self.calls, **out, "keys_changed": keys, "template_refused": refused}
