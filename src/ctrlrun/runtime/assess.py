"""``control.evaluate``: what the policy and the store would make of a call, writing nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctrlrun.errors import AlreadyCommitted, EffectKeyError, Refused
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus
from ctrlrun.kernel.call import refusal_before_asking
from ctrlrun.kernel.effect import EffectRecord, EffectState
from ctrlrun.kernel.policy import Decision, Policy
from ctrlrun.runtime.call import committed_receipt

if TYPE_CHECKING:
    from ctrlrun.runtime.control import Control


@dataclass(frozen=True, slots=True)
class Assessment:
    """The answer of ``Control.evaluate``. ``decision`` and ``reason`` (the rule label, e.g.
    ``rule[1]`` or ``no_matching_rule``) are the policy's; ``effect_key`` the key the call
    would reserve and ``effect_state`` that key's state now (None: never reserved);
    ``approval`` the request that decides it if it needs a person (a usable grant, a standing
    denial or the pending request), and ``approved`` whether a usable grant exists.
    ``refusal``: for a call that needs a person and has no usable grant, the refusal it gets
    before anyone is asked (its key committed, held or AMBIGUOUS), else None."""

    action: Action
    decision: Decision
    reason: str
    rule: int | None
    policy_hash: str
    effect_key: str | None
    effect_state: EffectState | None
    approval: ApprovalRecord | None
    refusal: Refused | None = None

    @property
    def approved(self) -> bool:
        """True when an unexpired, unused grant would authorise this exact call."""
        return self.approval is not None and self.approval.status is ApprovalStatus.GRANTED


def assess(control: Control, action: Action, policy: Policy | None = None) -> Assessment:
    """``Assessment`` of ``action`` under ``policy`` (by default ``control``'s current one)
    and ``control``'s store: reads only. A key that cannot be rendered is a ``deny`` with
    reason ``effect_key_error``."""
    if policy is None:
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
    approval = refusal = None
    if decision is Decision.APPROVE:
        approval = control.approvals.for_built(action)
        if approval is None or approval.status is not ApprovalStatus.GRANTED:
            refusal = _before_asking(control, record)
    return Assessment(
        action=action,
        decision=decision,
        reason=reason,
        rule=rule,
        policy_hash=policy.policy_hash,
        effect_key=key,
        effect_state=record.state if record is not None else None,
        approval=approval,
        refusal=refusal,
    )


def _before_asking(control: Control, record: EffectRecord | None) -> Refused | None:
    refusal = refusal_before_asking(record, now=control.now())
    if isinstance(refusal, AlreadyCommitted) and record is not None:
        refusal.receipt_id = committed_receipt(control.store, record.effect_key)
    return refusal
