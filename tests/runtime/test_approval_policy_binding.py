"""An approval is bound to the policy it was requested under: presented under another policy
it is refused (``policy_changed``) and stays unused; under its own policy it still works."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import ApprovalMismatch, ApprovalStatus, Control, MismatchReason
from ctrlrun.config import load_policy_text
from support.policies import POLICY

WIDER = (
    POLICY
    + """\
  iam.read_only:
    decision: allow
"""
)


def test_an_approval_under_another_policy_is_refused_and_stays_unused(store, clock):
    before = Control(load_policy_text(POLICY), store, clock=clock)
    after = Control(load_policy_text(WIDER), store, clock=clock)
    assert before.policy.policy_hash != after.policy.policy_hash
    ran = []

    def refund(payment_id: str, amount: int):
        ran.append(amount)
        return "refunded"

    def call(control):
        guarded = ctrlrun.protect("stripe.refund", control=control)(refund)
        return guarded("pay_big", 200_000)

    with ctrlrun.context("bot"):
        with pytest.raises(ctrlrun.ApprovalRequired) as needed:
            call(before)
        approval_id = needed.value.request_id
        store.grant_approval(approval_id, "alice")
        with ctrlrun.with_approval(approval_id):
            with pytest.raises(ApprovalMismatch) as refused:
                call(after)
            assert refused.value.reason is MismatchReason.POLICY_CHANGED
            assert ran == []
            assert store.get_approval(approval_id).status is ApprovalStatus.GRANTED
            assert call(before) == "refunded"
    assert ran == [200_000]
    assert store.get_approval(approval_id).status is ApprovalStatus.CONSUMED
