"""The reservation planner, the transition checks and the idempotency token."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctrlrun.errors import (
    ActionDenied,
    AmbiguousEffect,
    DenyReason,
    DuplicateEffect,
    DuplicateState,
    InvalidArgument,
)
from ctrlrun.kernel.effect import (
    EffectRecord,
    EffectState,
    PlanKind,
    idempotency_token_for,
    plan_reservation,
    plan_resolution,
    plan_transition,
    resolution_error,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(minutes=5)
KEY = "refund:pay_1"


def record(
    state: EffectState,
    *,
    lease_in: timedelta | None = LEASE,
    attempt: int = 1,
    action_id: str = "act_holder",
) -> EffectRecord:
    expiry = None if lease_in is None else NOW + lease_in
    return EffectRecord(KEY, state, action_id, attempt, NOW, NOW, expiry)


def plan(existing: EffectRecord | None, **kwargs):
    return plan_reservation(
        existing, effect_key=KEY, action_id="act_new", lease=LEASE, now=NOW, **kwargs
    )


class TestPlannerTable:
    def test_no_record_grants_attempt_one(self):
        result = plan(None)
        assert result.kind is PlanKind.INSERT and result.refusal is None
        assert result.reservation.attempt == 1
        assert result.reservation.lease_expires_at == NOW + LEASE

    def test_committed_is_a_duplicate(self):
        result = plan(record(EffectState.COMMITTED, lease_in=None))
        assert isinstance(result.refusal, DuplicateEffect)
        assert result.refusal.state is DuplicateState.COMMITTED
        assert not result.ambiguate and result.reservation is None

    def test_ambiguous_is_refused_as_ambiguous(self):
        result = plan(record(EffectState.AMBIGUOUS, lease_in=None))
        assert isinstance(result.refusal, AmbiguousEffect) and not result.ambiguate
        assert result.refusal.effect_key == KEY

    def test_failed_is_renewed_at_the_next_attempt(self):
        result = plan(record(EffectState.FAILED, lease_in=None, attempt=3))
        assert result.kind is PlanKind.RENEW
        assert result.reservation.attempt == 4 and result.renews_attempt == 3
        assert result.renews_action_id == "act_holder"  # the failed attempt's action

    def test_failed_past_the_ceiling_is_denied(self):
        result = plan(record(EffectState.FAILED, lease_in=None, attempt=3), max_attempts=3)
        assert isinstance(result.refusal, ActionDenied)
        assert result.refusal.reason is DenyReason.ATTEMPT_CEILING

    def test_failed_under_the_ceiling_is_renewed(self):
        result = plan(record(EffectState.FAILED, lease_in=None, attempt=2), max_attempts=3)
        assert result.reservation.attempt == 3

    @pytest.mark.parametrize("state", [EffectState.RESERVED, EffectState.EXECUTING])
    def test_a_live_lease_is_in_progress_even_for_the_same_action(self, state):
        same = plan_reservation(
            record(state, action_id="act_new"),
            effect_key=KEY,
            action_id="act_new",
            lease=LEASE,
            now=NOW,
        )
        assert isinstance(same.refusal, DuplicateEffect)
        assert same.refusal.state is DuplicateState.IN_PROGRESS

    def test_the_lease_is_live_at_its_expiry_instant(self):
        assert isinstance(
            plan(record(EffectState.EXECUTING, lease_in=timedelta(0))).refusal, DuplicateEffect
        )

    @pytest.mark.parametrize("state", [EffectState.RESERVED, EffectState.EXECUTING])
    @pytest.mark.parametrize("lease_in", [timedelta(microseconds=-1), None])
    def test_a_lapsed_lease_is_ambiguated_then_refused(self, state, lease_in):
        result = plan(record(state, lease_in=lease_in))
        assert isinstance(result.refusal, AmbiguousEffect) and result.ambiguate
        assert result.refusal.action_id == "act_holder"

    @pytest.mark.parametrize(
        "kwargs",
        [{"effect_key": ""}, {"action_id": ""}, {"lease": timedelta(0)}],
    )
    def test_bad_input_is_refused(self, kwargs):
        base = {"effect_key": KEY, "action_id": "a", "lease": LEASE, "now": NOW}
        with pytest.raises(InvalidArgument):
            plan_reservation(None, **{**base, **kwargs})


class TestTransitions:
    def check(
        self,
        existing,
        *,
        action_id="act_holder",
        attempt=1,
        expected=frozenset({EffectState.EXECUTING}),
    ):
        return plan_transition(
            existing,
            effect_key=KEY,
            action_id=action_id,
            attempt=attempt,
            expected=expected,
            now=NOW,
        )

    def test_our_record_in_the_expected_state_may_move(self):
        assert self.check(record(EffectState.EXECUTING)) is None

    def test_no_record_is_a_wiring_bug(self):
        assert isinstance(self.check(None), InvalidArgument)

    def test_ambiguous_refuses_as_ambiguous(self):
        assert isinstance(self.check(record(EffectState.AMBIGUOUS, lease_in=None)), AmbiguousEffect)

    def test_committed_refuses_as_duplicate(self):
        refusal = self.check(record(EffectState.COMMITTED, lease_in=None))
        assert isinstance(refusal, DuplicateEffect)
        assert refusal.state is DuplicateState.COMMITTED

    def test_another_live_holder_refuses_as_in_progress(self):
        refusal = self.check(record(EffectState.EXECUTING), action_id="act_other")
        assert isinstance(refusal, DuplicateEffect)
        assert refusal.state is DuplicateState.IN_PROGRESS

    def test_a_different_attempt_is_not_ours(self):
        refusal = self.check(record(EffectState.EXECUTING, lease_in=None, attempt=2))
        assert isinstance(refusal, InvalidArgument)

    def test_our_record_in_another_state_is_a_wiring_bug(self):
        assert isinstance(self.check(record(EffectState.FAILED, lease_in=None)), InvalidArgument)


class TestResolution:
    def test_only_ambiguous_resolves(self):
        ambiguous = record(EffectState.AMBIGUOUS, lease_in=None)
        assert plan_resolution(ambiguous, effect_key=KEY, target=EffectState.FAILED) is None
        assert plan_resolution(ambiguous, effect_key=KEY, target=EffectState.COMMITTED) is None
        for state in (EffectState.COMMITTED, EffectState.FAILED, EffectState.EXECUTING):
            refusal = plan_resolution(record(state), effect_key=KEY, target=EffectState.FAILED)
            assert isinstance(refusal, InvalidArgument)
        assert isinstance(
            plan_resolution(None, effect_key=KEY, target=EffectState.FAILED), InvalidArgument
        )

    @pytest.mark.parametrize("target", [EffectState.AMBIGUOUS, EffectState.EXECUTING])
    def test_only_to_committed_or_failed(self, target):
        ambiguous = record(EffectState.AMBIGUOUS, lease_in=None)
        assert isinstance(
            plan_resolution(ambiguous, effect_key=KEY, target=target), InvalidArgument
        )

    def test_the_error_keeps_what_was_there(self):
        prior = EffectRecord(KEY, EffectState.AMBIGUOUS, "a", 1, NOW, NOW, error="timeout")
        assert resolution_error(prior, EffectState.FAILED, "cli:local") == (
            "resolved failed by cli:local (was: timeout)"
        )
        fresh = EffectRecord(KEY, EffectState.AMBIGUOUS, "a", 1, NOW, NOW)
        assert resolution_error(fresh, EffectState.COMMITTED, "x") == "resolved committed by x"


class TestLease:
    def test_lease_expired_is_display_only_for_live_states(self):
        assert record(EffectState.EXECUTING, lease_in=timedelta(seconds=-1)).lease_expired(NOW)
        assert not record(EffectState.COMMITTED, lease_in=None).lease_expired(NOW)
        assert not record(EffectState.EXECUTING).lease_expired(NOW)


class TestIdempotencyToken:
    def test_pinned_vectors(self):
        assert idempotency_token_for("refund:txn_1", 1) == "382ee448-97da-8107-b674-8c253650d93f"
        assert idempotency_token_for("refund:txn_1", 2) == "28bb40af-814c-8fb6-ba63-e8663b1c036d"
        assert idempotency_token_for("refund:txn_2", 1) == "89977bc9-d128-8ae8-871f-f5265155e60f"

    @pytest.mark.parametrize(("key", "attempt"), [("", 1), ("k", 0), ("k", True), (None, 1)])
    def test_bad_input_is_refused(self, key, attempt):
        with pytest.raises(InvalidArgument):
            idempotency_token_for(key, attempt)
