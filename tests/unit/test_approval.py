"""Approval checks: binding, single use, expiry, and the fixed order of refusals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctrlrun.errors import (
    ActionDenied,
    ApprovalMismatch,
    DenyReason,
    InvalidArgument,
    MismatchReason,
)
from ctrlrun.kernel.approval import (
    ApprovalRecord,
    ApprovalStatus,
    check_person,
    plan_answer,
    plan_consume,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HASH = "sha256:" + "ab" * 32


def approval(
    status: ApprovalStatus,
    *,
    expires_in: timedelta = timedelta(minutes=15),
    action_hash: str = HASH,
) -> ApprovalRecord:
    return ApprovalRecord(
        "apr_1", action_hash, {}, "sha256:p", status, NOW, NOW + expires_in, approver="human"
    )


def consume(record, action_hash=HASH, now=NOW):
    return plan_consume(record, approval_id="apr_1", action_hash=action_hash, now=now)


class TestConsume:
    def test_a_granted_matching_unexpired_approval_is_consumable(self):
        assert consume(approval(ApprovalStatus.GRANTED)).refusal is None

    def test_unknown(self):
        refusal = consume(None).refusal
        assert isinstance(refusal, ApprovalMismatch) and refusal.reason is MismatchReason.UNKNOWN

    def test_mismatch_is_checked_before_status(self):
        for status in ApprovalStatus:
            refusal = consume(approval(status), action_hash="sha256:other").refusal
            assert isinstance(refusal, ApprovalMismatch)
            assert refusal.reason is MismatchReason.MISMATCH

    def test_denied_denies_the_action(self):
        refusal = consume(approval(ApprovalStatus.DENIED)).refusal
        assert isinstance(refusal, ActionDenied) and refusal.reason is DenyReason.APPROVAL_DENIED

    @pytest.mark.parametrize(
        ("status", "reason"),
        [
            (ApprovalStatus.PENDING, MismatchReason.PENDING),
            (ApprovalStatus.CONSUMED, MismatchReason.CONSUMED),
            (ApprovalStatus.EXPIRED, MismatchReason.EXPIRED),
        ],
    )
    def test_not_granted_names_its_status(self, status, reason):
        plan = consume(approval(status))
        assert plan.refusal.reason is reason and not plan.expire

    def test_expiry_is_checked_last_and_is_a_kept_write(self):
        plan = consume(approval(ApprovalStatus.GRANTED), now=NOW + timedelta(minutes=16))
        assert plan.refusal.reason is MismatchReason.EXPIRED and plan.expire

    def test_the_expiry_instant_itself_is_still_valid(self):
        assert (
            consume(approval(ApprovalStatus.GRANTED), now=NOW + timedelta(minutes=15)).refusal
            is None
        )

    def test_a_denied_approval_past_expiry_is_still_reported_denied(self):
        plan = consume(approval(ApprovalStatus.DENIED), now=NOW + timedelta(days=1))
        assert isinstance(plan.refusal, ActionDenied)


class TestAnswer:
    def test_pending_may_be_answered(self):
        assert (
            plan_answer(approval(ApprovalStatus.PENDING), approval_id="apr_1", now=NOW).refusal
            is None
        )

    def test_unknown_then_answered_then_expired(self):
        assert plan_answer(None, approval_id="x", now=NOW).refusal.reason is MismatchReason.UNKNOWN
        for status in (ApprovalStatus.GRANTED, ApprovalStatus.DENIED, ApprovalStatus.CONSUMED):
            refusal = plan_answer(approval(status), approval_id="apr_1", now=NOW).refusal
            assert refusal.reason is MismatchReason.ANSWERED
        late = plan_answer(
            approval(ApprovalStatus.PENDING), approval_id="apr_1", now=NOW + timedelta(hours=1)
        )
        assert late.refusal.reason is MismatchReason.EXPIRED and late.expire
        expired = plan_answer(approval(ApprovalStatus.EXPIRED), approval_id="apr_1", now=NOW)
        assert expired.refusal.reason is MismatchReason.EXPIRED and not expired.expire


@pytest.mark.parametrize("value", ["", "  ", "a\nb", "a\x00", "a\u200bb", None, 3])
def test_people_names_are_one_printable_line(value):
    with pytest.raises(InvalidArgument):
        check_person(value)


def test_a_plain_name_is_accepted():
    assert check_person("cli:local") == "cli:local"
