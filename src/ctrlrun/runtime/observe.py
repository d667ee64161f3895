"""The first half of an observed call (``mode: observe``): evaluate in full, write nothing.

The policy decides, the effect key is rendered and its record read, a usable grant looked up,
exactly as enforcement would; ``kernel.observe`` says what enforcement would have done. No key
is reserved and no approval consumed or requested, so an observed call never holds a key that a
later enforced call depends on. The executor then runs as usual, and one transaction records
the events and the ``observed`` receipt (``observed_request``, from ``pipeline.finish``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ctrlrun.errors import EffectKeyError, InvalidArgument
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.approval import plan_reuse
from ctrlrun.kernel.budget import BudgetVerdict
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft
from ctrlrun.kernel.observe import plan_observation
from ctrlrun.kernel.policy import Decision, Policy
from ctrlrun.kernel.receipt import ReceiptResult
from ctrlrun.kernel.text import check_label
from ctrlrun.runtime.budget import observed_budget
from ctrlrun.runtime.call import OUTCOME_EVENTS, CallSpec
from ctrlrun.runtime.receipts import Verdict, evaluated, proposed, receipt_draft
from ctrlrun.store.protocol import FinishRequest, Started

if TYPE_CHECKING:
    from ctrlrun.runtime.pipeline import InFlight

NOT_STARTED = Started(reservation=None, approval=None)
"""An observed call reserves nothing and consumes nothing."""


def begin_observed(call: InFlight) -> None:
    """Sets ``call``'s verdict, first events and what enforcement would have done
    (``observed``); reads only. Its effect key stays None: an observed call holds none."""
    action, policy, store = call.action, call.policy, call.store
    evaluation = policy.evaluate(action)
    decision, rule = evaluation.decision, evaluation.label
    key, key_error = _effect_key(action, policy, call.spec)
    if key_error:
        decision, rule = Decision.DENY, "effect_key_error"
    record = store.get_effect(key) if key is not None else None
    budget = None
    if decision is not Decision.DENY:
        decision, rule, budget = observed_budget(store, action, policy, decision, rule)
    approved = False  # a grant for exactly this call: a rule's approve, or past the limit
    if decision is Decision.APPROVE or (budget is not None and budget[0] is BudgetVerdict.APPROVE):
        found = store.find_approvals(action.action_hash, policy.policy_hash)
        approved = plan_reuse(found, now=call.clock()).granted is not None
    call.observed = plan_observation(
        decision, rule, key, record, approved=approved, now=call.clock(), budget=budget
    )
    call.verdict = Verdict(str(decision), rule, policy.policy_hash, evaluation.controls)
    call.pre = (proposed(action), evaluated(action, call.verdict, key))


def observed_request(
    call: InFlight, outcome: EffectState, value: Any, error: str | None, now: datetime
) -> FinishRequest:
    """An observed call's one transaction: its first events, the outcome's event and the
    ``observed`` receipt; no effect record is touched."""
    assert call.observed is not None
    observed = {**call.observed.to_dict(), "outcome": str(outcome)}
    draft = receipt_draft(
        call.action,
        call.verdict,
        ReceiptResult.OBSERVED,
        started_at=call.started_at,
        finished_at=now,
        error=error,
        observed=observed,
    )
    data = {"observed": observed} if error is None else {"observed": observed, "error": error}
    event = EventDraft(OUTCOME_EVENTS[outcome], call.action.action_id, None, data=data)
    return FinishRequest(
        action_id=call.action.action_id,
        receipt=draft,
        result=value,
        error=error,
        events=(*call.pre, event),
    )


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
