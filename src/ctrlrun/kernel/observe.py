"""Observe mode, decided purely: what enforcement would have done to a call that runs anyway.

An action (or a whole policy) with ``mode: observe`` is evaluated in full and its function
runs; nothing is reserved or consumed, and its receipt (result ``observed``) says what an
enforced call would have met, in enforcement's own order: the policy's denial first (an
unrenderable effect key is one), then the effect key's state (committed or in progress:
``duplicate``; AMBIGUOUS or a lapsed lease: ``ambiguous``), then a person's approval when no
usable grant exists. ``would_have`` is None when enforcement would have run it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from ctrlrun.kernel.budget import BudgetVerdict
from ctrlrun.kernel.effect import LIVE_STATES, EffectRecord, EffectState
from ctrlrun.kernel.policy_model import Decision


class WouldHave(StrEnum):
    """What enforcement would have answered an observed call."""

    DENIED = "denied"
    APPROVAL_REQUIRED = "approval_required"
    DUPLICATE = "duplicate"
    AMBIGUOUS = "ambiguous"
    OVER_BUDGET = "over_budget"


@dataclass(frozen=True, slots=True)
class Observation:
    """The verdict recorded on an observed call's receipt: ``would_have`` (None: it would
    have run), ``why`` for a person, and the effect key it would have reserved."""

    would_have: WouldHave | None
    why: str
    effect_key: str | None

    def to_dict(self) -> dict[str, Any]:
        """The receipt's ``observed`` field."""
        return {
            "would_have": None if self.would_have is None else str(self.would_have),
            "why": self.why,
            "effect_key": self.effect_key,
        }


def plan_observation(
    decision: Decision,
    rule: str,
    effect_key: str | None,
    record: EffectRecord | None,
    *,
    approved: bool,
    now: datetime,
    budget: tuple[BudgetVerdict, str] | None = None,
) -> Observation:
    """What enforcement would have done. ``rule`` is the verdict's label (``rule[2]``,
    ``effect_key_error``); ``record`` the key's record now; ``approved``: a usable grant
    exists for exactly this call; ``budget`` what the budget, read without consuming, says
    and the state it found (None: unbudgeted). Past the limit is ``over_budget`` (``over:
    deny``) or ``approval_required`` (``over: approve``, unless a grant for exactly this call
    exists: enforcement would then charge it past the limit), after the checks enforcement
    makes first."""
    if decision is Decision.DENY:
        return Observation(WouldHave.DENIED, f"denied ({rule})", effect_key)
    if record is not None:
        if record.state is EffectState.COMMITTED:
            why = f"{effect_key} already committed (attempt {record.attempt})"
            return Observation(WouldHave.DUPLICATE, why, effect_key)
        if record.state is EffectState.AMBIGUOUS or record.lease_expired(now):
            why = f"{effect_key} is ambiguous (attempt {record.attempt}): nobody knows if it ran"
            return Observation(WouldHave.AMBIGUOUS, why, effect_key)
        if record.state in LIVE_STATES:
            why = f"{effect_key} is in progress (attempt {record.attempt})"
            return Observation(WouldHave.DUPLICATE, why, effect_key)
    if decision is Decision.APPROVE and not approved:
        return Observation(WouldHave.APPROVAL_REQUIRED, f"needs a person ({rule})", effect_key)
    if budget is not None and budget[0] is BudgetVerdict.DENY:
        return Observation(WouldHave.OVER_BUDGET, f"over budget: {budget[1]}", effect_key)
    if budget is not None and budget[0] is BudgetVerdict.APPROVE and not approved:
        why = f"needs a person: over budget: {budget[1]}"
        return Observation(WouldHave.APPROVAL_REQUIRED, why, effect_key)
    return Observation(None, f"would have run ({rule})", effect_key)
