"""``control.evaluate``: what the policy and the store would make of a call, writing nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctrlrun.errors import EffectKeyError
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.policy import Decision

if TYPE_CHECKING:
    from ctrlrun.runtime.control import Control


@dataclass(frozen=True, slots=True)
class Assessment:
    """The answer of ``Control.evaluate``. ``decision`` and ``reason`` (the rule label, e.g.
    ``rule[1]`` or ``no_matching_rule``) are the policy's; ``effect_key`` the key the call
    would reserve and ``effect_state`` that key's state now (None: never reserved);
    ``approval`` the request that decides it if it needs a person (a usable grant, a standing
    denial or the pending request), and ``approved`` whether a usable grant exists."""

    action: Action
    decision: Decision
    reason: str
    rule: int | None
    policy_hash: str
    effect_key: str | None
    effect_state: EffectState | None
    approval: ApprovalRecord | None

    @property
    def approved(self) -> bool:
        """True when an unexpired, unused grant would authorise this exact call."""
        return self.approval is not None and self.approval.status is ApprovalStatus.GRANTED


def assess(control: Control, action: Action) -> Assessment:
    """``Assessment`` of ``action`` under ``control``'s current policy and store: reads only.
    A key that cannot be rendered is a ``deny`` with reason ``effect_key_error``."""
    policy = control.policy
    evaluation = policy.evaluate(action)
    decision, reason, rule = evaluation.decision, evaluation.label, evaluation.rule
    entry = policy.entry(action.name)
    key = None
    if entry is not None and entry.effect is not None:
        try:
            key = entry.effect.render(action.plain_arguments, action.resource)
        except EffectKeyError:
            decision, reason, rule = Decision.DENY, "effect_key_error", None
    record = control.store.get_effect(key) if key is not None else None
    approval = None
    if decision is Decision.APPROVE:
        approval = control.approvals.for_built(action)
    return Assessment(
        action=action,
        decision=decision,
        reason=reason,
        rule=rule,
        policy_hash=policy.policy_hash,
        effect_key=key,
        effect_state=record.state if record is not None else None,
        approval=approval,
    )
