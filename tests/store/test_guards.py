"""The shared store operations' own guards, below the contract the conformance suite grades
(``tests/conformance`` runs that suite on both stores): a conditional write that finds the
row moved writes nothing."""

from __future__ import annotations

from datetime import timedelta

from ctrlrun.kernel.effect import EffectState, PlanKind, Reservation, ReservationPlan
from ctrlrun.store.ops.effects import _renew
from support.store_calls import finish, start

KEY = "refund:pay_1"


def test_a_renewal_matches_the_failed_attempts_action_too(store):
    """The renewal's UPDATE is conditional on state, attempt AND action_id: a plan made
    against another action's attempt matches no row (a lost race, never a silent write)."""
    start(store)
    finish(store, outcome=EffectState.FAILED)
    failed = store.get_effect(KEY)
    renewal = Reservation(KEY, "act_2", 2, failed.updated_at + timedelta(minutes=5))

    def renew_from(action_id):
        plan = ReservationPlan(
            PlanKind.RENEW, renewal, renews_attempt=1, renews_action_id=action_id
        )
        return store.transact(lambda txn: _renew(txn, renewal, EffectState.EXECUTING, plan))

    assert renew_from("act_other") is False
    assert store.get_effect(KEY) == failed  # untouched
    assert renew_from("act_1") is True
    assert store.get_effect(KEY).action_id == "act_2"
