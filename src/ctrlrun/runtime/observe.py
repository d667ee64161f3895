"""The first half of an observed call (``mode: observe``): evaluate in full, write nothing.

The policy decides, the effect key is rendered and its record read, a usable grant looked up,
exactly as enforcement would; ``kernel.observe`` says what enforcement would have done. No key
is reserved and no approval consumed or requested, so an observed call never holds a key that a
later enforced call depends on. The executor then runs as usual, and one transaction records
the events and the ``observed`` receipt (``call.finish_request``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ctrlrun.errors import EffectKeyError, InvalidArgument
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.approval import plan_reuse
from ctrlrun.kernel.budget import BudgetVerdict
from ctrlrun.kernel.observe import plan_observation
from ctrlrun.kernel.policy import Decision, Policy
from ctrlrun.kernel.text import check_label
from ctrlrun.runtime.budget import observed_budget
from ctrlrun.runtime.call import CallSpec, InFlight
from ctrlrun.runtime.receipts import Verdict, evaluated, proposed
from ctrlrun.store.protocol import Started

if TYPE_CHECKING:
    from ctrlrun.runtime.control import Control

NOT_STARTED = Started(reservation=None, approval=None)
"""An observed call reserves nothing and consumes nothing."""


def begin_observed(
    control: Control, action: Action, spec: CallSpec, policy: Policy, started_at: datetime
) -> InFlight:
    """The observed call, with what enforcement would have done; reads only."""
    evaluation = policy.evaluate(action)
    decision, rule = evaluation.decision, evaluation.label
    key, key_error = _effect_key(action, policy, spec)
    if key_error:
        decision, rule = Decision.DENY, "effect_key_error"
    record = control.store.get_effect(key) if key is not None else None
    budget = None
    if decision is not Decision.DENY:
        decision, rule, budget = observed_budget(control.store, action, policy, decision, rule)
    approved = False  # a grant for exactly this call: a rule's approve, or past the limit
    if decision is Decision.APPROVE or (budget is not None and budget[0] is BudgetVerdict.APPROVE):
        found = control.store.find_approvals(action.action_hash, policy.policy_hash)
        approved = plan_reuse(found, now=control.now()).granted is not None
    observation = plan_observation(
        decision, rule, key, record, approved=approved, now=control.now(), budget=budget
    )
    verdict = Verdict(str(decision), rule, policy.policy_hash, evaluation.controls)
    pre = (proposed(action), evaluated(action, verdict, key))
    return InFlight(action, verdict, None, started_at, pre, policy, observed=observation)


def _effect_key(action: Action, policy: Policy, spec: CallSpec) -> tuple[str | None, bool]:
    """The key enforcement would reserve, and whether rendering it failed."""
    if spec.effect_key is not None:
        return spec.effect_key, False
    entry = policy.entry(action.name)
    template = spec.effect or (entry.effect if entry is not None else None)
    if template is None:
        return None, False
    try:
        return check_label(template.render(action.plain_arguments, action.resource), "key"), False
    except (EffectKeyError, InvalidArgument):
        return None, True
