"""What a person needs beside an approval request to decide it (issue 27): the rule that
matched, the effect key and where it stands now, the environment, how many approvers are still
needed, and the arguments the policy says how to show (money as ``€2,500.00 (250000)``).

Read from the store (the request's ``POLICY_EVALUATED`` event, its effect record) and, for
the rule's text and the arguments' display, from the policy when it is the one the request was
decided under (a rule index read against another policy could name another rule). Shared by
``ctrlrun approvals`` and the console's inbox.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ctrlrun._time import display_instant
from ctrlrun.errors import CtrlrunError
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus
from ctrlrun.kernel.argument_display import shown_arguments
from ctrlrun.kernel.budget import BudgetState
from ctrlrun.kernel.budget_facts import ShownBudget, shown_budget
from ctrlrun.kernel.effect import EffectRecord, idempotency_token_for
from ctrlrun.kernel.event import Event, EventType
from ctrlrun.kernel.policy import ActionPolicy, Policy
from ctrlrun.kernel.policy_model import describe_rule
from ctrlrun.store import peek_budget
from ctrlrun.store.protocol import StateStore

_RULE: Final = re.compile(r"rule\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """``rule``: the label the decision recorded (``rule[1]``, ``decision``); ``rule_text``:
    that rule as the policy writes it (None unless the policy at hand is the request's);
    ``effect_state``: the key's state now (None: no record yet); ``still_needed``: grants
    missing before it is granted; ``shown``: displayed arguments by name."""

    rule: str | None = None
    rule_text: str | None = None
    effect_key: str | None = None
    effect_state: str | None = None
    environment: str | None = None
    still_needed: int = 0
    shown: dict[str, str] = field(default_factory=dict)
    budget: ShownBudget = field(default_factory=ShownBudget)
    budget_now: BudgetState | None = None

    def document(self) -> dict[str, Any]:
        """The ``--json`` fields (stable names)."""
        facts = self.budget.facts
        return {
            "rule": self.rule,
            "rule_text": self.rule_text,
            "effect_key": self.effect_key,
            "effect_state": self.effect_state,
            "environment": self.environment,
            "approvals_needed": self.still_needed,
            "arguments_shown": self.shown,
            "budget": None if facts is None else facts.to_dict(),
            "budget_text": self.budget.line(),
            "budget_now": None if self.budget_now is None else self.budget_now.to_dict(),
        }

    def budget_now_text(self) -> str | None:
        """What the budget's current window holds now, beside what the request recorded."""
        now = self.budget_now
        if now is None:
            return None
        return (
            f"now: spent {now.spent_before} of {now.limit} in the window from"
            f" {display_instant(now.window_start)}"
        )


def request_facts(
    store: StateStore, record: ApprovalRecord, policy: Policy | None, granted: int
) -> RequestFacts:
    """The facts beside ``record``, which ``granted`` distinct approvers have granted so far."""
    action = record.action
    name = str(action.get("name", ""))
    action_id = str(action.get("action_id", ""))
    events = store.events(action_id)
    decided = [e for e in events if e.type is EventType.POLICY_EVALUATED]
    rule = str(decided[0].data.get("reason")) if decided else None
    entry = policy.entry(name) if policy is not None else None
    key = decided[0].effect_key if decided else None
    if key is None and entry is not None:  # asked before the call (a framework's pause)
        key = _rendered_key(entry, action)
    effect = store.get_effect(key) if key else None
    same = entry is not None and policy is not None and policy.policy_hash == record.policy_hash
    arguments = action.get("arguments")
    shown = (
        shown_arguments(arguments, entry.displays)
        if entry is not None and isinstance(arguments, dict)
        else {}
    )
    live = record.status is ApprovalStatus.PENDING
    budget = _budget(events, record, entry if same else None, entry)
    return RequestFacts(
        rule=rule,
        rule_text=_rule_text(entry, rule) if same and entry is not None else None,
        effect_key=key,
        effect_state=None if effect is None else str(effect.state),
        environment=None if action.get("environment") is None else str(action["environment"]),
        still_needed=max(record.required - granted, 0) if live else 0,
        shown=shown,
        budget=budget,
        budget_now=_budget_now(store, budget, entry if same and live else None),
    )


def _budget(
    events: Sequence[Event],
    record: ApprovalRecord,
    entry: ActionPolicy | None,
    shown_as: ActionPolicy | None,
) -> ShownBudget:
    """The budget ``record``'s ``APPROVAL_REQUESTED`` event recorded, checked against its
    action and, when the policy at hand is the request's (``entry``), against that policy's
    budget; amounts shown as ``shown_as`` displays them (as the arguments are)."""
    data = next(
        (
            e.data.get("budget")
            for e in events
            if e.type is EventType.APPROVAL_REQUESTED and e.approval_id == record.approval_id
        ),
        None,
    )
    return shown_budget(
        data,
        record.action,
        entry.budget if entry is not None else None,
        shown_as.displays if shown_as is not None else None,
    )


def _budget_now(
    store: StateStore, shown: ShownBudget, entry: ActionPolicy | None
) -> BudgetState | None:
    """The budget's current window as the store holds it now, for a pending request whose
    checked facts name the budget of the policy at hand (a read; nothing is consumed)."""
    if shown.facts is None or entry is None or entry.budget is None:
        return None
    return peek_budget(store, entry.budget, shown.facts.budget_id, shown.facts.amount)


def _rendered_key(entry: ActionPolicy, action: dict[str, Any]) -> str | None:
    """The key the policy's ``effect`` template renders from the request's arguments, or None
    (no template, or the arguments do not render one)."""
    arguments = action.get("arguments")
    if entry.effect is None or not isinstance(arguments, dict):
        return None
    try:
        return entry.effect.render(arguments, action.get("resource"))
    except CtrlrunError:
        return None


def _rule_text(entry: ActionPolicy, rule: str | None) -> str | None:
    if entry.decision is not None:
        return f"every call: {entry.decision}"
    found = _RULE.fullmatch(rule or "")
    if found is None or int(found.group(1)) >= len(entry.rules):
        return None
    index = int(found.group(1))
    return describe_rule(entry.rules[index], entry.displays, entry.approval_for(index))


@dataclass(frozen=True, slots=True)
class EffectFacts:
    """What a person checks with the provider before resolving an effect: the action that
    holds the key (its name, arguments and principal, from its ``ACTION_PROPOSED`` event; None
    when the store has no such event), the attempt, and the idempotency token that attempt
    gave the provider (``idempotency_token_for``)."""

    action: str | None
    arguments: Any
    principal: Any
    attempt: int
    token: str
    shown: dict[str, str] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The ``--json`` fields (stable names)."""
        return {
            "action": self.action,
            "arguments": self.arguments,
            "arguments_shown": self.shown,
            "principal": self.principal,
            "idempotency_token": self.token,
        }


def effect_facts(store: StateStore, record: EffectRecord, policy: Policy | None) -> EffectFacts:
    """The facts beside the effect ``record``."""
    proposed = next(
        (e for e in store.events(record.action_id) if e.type is EventType.ACTION_PROPOSED), None
    )
    action = proposed.data.get("action") if proposed is not None else None
    action = action if isinstance(action, dict) else {}
    name = action.get("name")
    arguments = action.get("arguments")
    entry = policy.entry(name) if policy is not None and isinstance(name, str) else None
    shown = (
        shown_arguments(arguments, entry.displays)
        if entry is not None and isinstance(arguments, dict)
        else {}
    )
    return EffectFacts(
        action=None if name is None else str(name),
        arguments=arguments,
        principal=action.get("principal"),
        attempt=record.attempt,
        token=idempotency_token_for(record.effect_key, max(record.attempt, 1)),
        shown=shown,
    )
