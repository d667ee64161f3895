"""What enforcement would have done to an observed call (kernel/observe.py), rung by rung."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ctrlrun.kernel.effect import EffectRecord, EffectState
from ctrlrun.kernel.observe import WouldHave, plan_observation
from ctrlrun.kernel.policy_model import Decision

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def record(state, *, lease=None):
    return EffectRecord("refund:p", state, "act_1", 2, NOW, NOW, lease_expires_at=lease)


def plan(decision=Decision.ALLOW, rec=None, *, approved=False):
    return plan_observation(decision, "rule[0]", "refund:p", rec, approved=approved, now=NOW)


def test_each_rung_in_enforcement_s_order():
    assert plan(Decision.DENY, record(EffectState.COMMITTED)).would_have is WouldHave.DENIED
    committed = plan(Decision.APPROVE, record(EffectState.COMMITTED))
    assert committed.would_have is WouldHave.DUPLICATE and "attempt 2" in committed.why
    live = record(EffectState.EXECUTING, lease=NOW + timedelta(minutes=1))
    assert plan(rec=live).would_have is WouldHave.DUPLICATE
    lapsed = record(EffectState.EXECUTING, lease=NOW - timedelta(minutes=1))
    assert plan(rec=lapsed).would_have is WouldHave.AMBIGUOUS
    assert plan(rec=record(EffectState.AMBIGUOUS)).would_have is WouldHave.AMBIGUOUS
    assert (
        plan(Decision.APPROVE, record(EffectState.FAILED)).would_have is WouldHave.APPROVAL_REQUIRED
    )
    assert plan(Decision.APPROVE, approved=True).would_have is None
    ran = plan(rec=record(EffectState.FAILED))
    assert ran.would_have is None and ran.to_dict() == {
        "would_have": None, "why": "would have run (rule[0])", "effect_key": "refund:p",
    }  # fmt: skip
    assert plan(Decision.DENY).to_dict()["would_have"] == "denied"
