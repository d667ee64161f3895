"""The store contract on every backend (SQLite file, Postgres schema): reservations,
transitions, approvals, resolution, evidence."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from ctrlrun.errors import (
    ActionDenied,
    AmbiguousEffect,
    ApprovalMismatch,
    DenyReason,
    DuplicateEffect,
    DuplicateState,
    InvalidArgument,
    MismatchReason,
)
from ctrlrun.kernel.approval import ApprovalRequestDraft, ApprovalStatus
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from support.store_calls import finish, start

KEY = "refund:pay_1"
HASH = "sha256:" + "ab" * 32


def request_approval(store, approval_id="apr_1", ttl=timedelta(minutes=15), action_hash=HASH):
    draft = ApprovalRequestDraft(
        approval_id, {"action_id": "act_0", "name": "a.b"}, action_hash, "sha256:policy", ttl
    )
    return store.put_approval_request(draft)


class TestOpening:
    def test_close_is_not_a_fence(self, store):
        start(store)
        store.close()
        assert store.get_effect(KEY).state is EffectState.EXECUTING
        with pytest.raises(DuplicateEffect):
            start(store, "act_2")


class TestReservation:
    def test_first_reservation_is_attempt_one_executing(self, store, clock):
        started = start(store)
        assert started.reservation.attempt == 1
        record = store.get_effect(KEY)
        assert record.state is EffectState.EXECUTING and record.action_id == "act_1"
        assert record.lease_expires_at == clock() + timedelta(minutes=5)

    def test_reserve_without_executing_then_begin(self, store):
        start(store, execute=False)
        assert store.get_effect(KEY).state is EffectState.RESERVED
        moved = store.begin_execution(KEY, "act_1", 1)
        assert moved.state is EffectState.EXECUTING
        with pytest.raises(InvalidArgument):
            store.begin_execution(KEY, "act_1", 1)

    def test_a_live_reservation_refuses_everyone_including_itself(self, store):
        start(store)
        for action_id in ("act_1", "act_2"):
            with pytest.raises(DuplicateEffect) as caught:
                start(store, action_id)
            assert caught.value.state is DuplicateState.IN_PROGRESS

    def test_committed_refuses_as_duplicate(self, store):
        start(store)
        finish(store)
        with pytest.raises(DuplicateEffect) as caught:
            start(store, "act_2")
        assert caught.value.state is DuplicateState.COMMITTED

    def test_failed_renews_at_the_next_attempt_and_clears_the_old_error(self, store):
        start(store)
        finish(store, outcome=EffectState.FAILED, error="NotExecuted: card declined")
        assert store.get_effect(KEY).error == "NotExecuted: card declined"
        started = start(store, "act_2")
        record = store.get_effect(KEY)
        assert started.reservation.attempt == 2 and record.attempt == 2
        assert record.action_id == "act_2" and record.error is None

    def test_a_renewal_matches_the_failed_attempts_action_too(self, store):
        """The renewal's UPDATE is conditional on state, attempt AND action_id: a plan made
        against another action's attempt matches no row (a lost race, never a silent write)."""
        from ctrlrun.kernel.effect import PlanKind, Reservation, ReservationPlan
        from ctrlrun.store.ops.effects import _renew

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

    def test_the_ceiling_refuses_a_renewal_and_writes_nothing(self, store):
        start(store)
        finish(store, outcome=EffectState.FAILED)
        with pytest.raises(ActionDenied) as caught:
            start(store, "act_2", max_attempts=1)
        assert caught.value.reason is DenyReason.ATTEMPT_CEILING
        assert store.get_effect(KEY).state is EffectState.FAILED

    def test_an_expired_lease_becomes_ambiguous_only_when_contended(self, store, clock):
        start(store)
        clock.advance(timedelta(minutes=6))
        assert store.get_effect(KEY).state is EffectState.EXECUTING  # reads never transition
        assert [r.state for r in store.list_effects()] == [EffectState.EXECUTING]
        with pytest.raises(AmbiguousEffect) as caught:
            start(store, "act_2")
        assert caught.value.action_id == "act_1"
        record = store.get_effect(KEY)
        assert record.state is EffectState.AMBIGUOUS and record.lease_expires_at is None
        assert "lease of attempt 1 expired" in record.error
        events = [e for e in store.events() if e.type is not EventType.CLOCK_SKEW_DETECTED]
        assert events[-1].type is EventType.EFFECT_LEASE_EXPIRED
        with pytest.raises(AmbiguousEffect):
            start(store, "act_3")

    def test_a_refused_reservation_writes_no_events(self, store):
        start(store)
        before = len(store.events())
        with pytest.raises(DuplicateEffect):
            start(store, "act_2", events=(EventDraft(EventType.ACTION_PROPOSED, "act_2"),))
        assert len(store.events()) == before

    def test_eight_threads_one_winner(self, store):
        barrier = threading.Barrier(8)
        outcomes: list[object] = []

        def contend(index: int) -> None:
            barrier.wait(timeout=10)
            try:
                outcomes.append(start(store, f"act_{index}").reservation)
            except DuplicateEffect as exc:
                outcomes.append(exc)

        threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        winners = [o for o in outcomes if not isinstance(o, DuplicateEffect)]
        assert len(outcomes) == 8 and len(winners) == 1
        assert store.get_effect(KEY).action_id == winners[0].action_id


class TestOutcomes:
    def test_finish_moves_only_our_executing_attempt(self, store):
        start(store)
        with pytest.raises(InvalidArgument):
            finish(store, key="refund:never_reserved")
        with pytest.raises(DuplicateEffect):
            finish(store, attempt=2)
        with pytest.raises(DuplicateEffect):
            finish(store, action_id="act_other")
        receipt = finish(store, result={"refund": "re_1"})
        assert receipt.seq == 1
        record = store.get_effect(KEY)
        assert record.state is EffectState.COMMITTED and record.result == {"refund": "re_1"}
        assert record.lease_expires_at is None

    def test_an_unserialisable_result_is_kept_as_its_repr(self, store):
        start(store)
        finish(store, result=object())
        assert "repr" in store.get_effect(KEY).result

    def test_ambiguous_is_idempotent_on_a_record_already_ambiguous(self, store, clock):
        start(store)
        clock.advance(timedelta(minutes=6))
        with pytest.raises(AmbiguousEffect):
            start(store, "act_2")
        finish(store, outcome=EffectState.AMBIGUOUS, error="TimeoutError")
        assert store.get_effect(KEY).state is EffectState.AMBIGUOUS

    def test_committing_over_an_ambiguated_record_is_refused(self, store, clock):
        start(store)
        clock.advance(timedelta(minutes=6))
        with pytest.raises(AmbiguousEffect):
            start(store, "act_2")
        with pytest.raises(AmbiguousEffect):
            finish(store)
        assert store.get_effect(KEY).state is EffectState.AMBIGUOUS
        assert store.receipts() == ()

    def test_ambiguous_settles_a_reserved_record(self, store):
        start(store, execute=False)
        finish(store, outcome=EffectState.AMBIGUOUS, error="KeyboardInterrupt")
        assert store.get_effect(KEY).state is EffectState.AMBIGUOUS


class TestResolution:
    @pytest.fixture
    def ambiguous(self, store):
        start(store)
        finish(store, outcome=EffectState.AMBIGUOUS, error="TimeoutError: read timed out")
        return store

    def test_resolve_failed_permits_a_retry(self, ambiguous):
        record = ambiguous.resolve_effect(KEY, EffectState.FAILED, "cli:local")
        assert record.state is EffectState.FAILED and record.resolved_by == "cli:local"
        assert record.error == "resolved failed by cli:local (was: TimeoutError: read timed out)"
        assert start(ambiguous, "act_2").reservation.attempt == 2
        assert ambiguous.get_effect(KEY).resolved_by is None

    def test_resolve_committed_refuses_a_retry(self, ambiguous):
        ambiguous.resolve_effect(KEY, EffectState.COMMITTED, "cli:local")
        with pytest.raises(DuplicateEffect):
            start(ambiguous, "act_2")
        resolved = [e for e in ambiguous.events() if e.type is EventType.EFFECT_RESOLVED]
        assert resolved[0].data == {
            "attempt": 1,
            "state": "committed",
            "resolver": "cli:local",
            "resolved_by": "human",
        }

    @pytest.mark.parametrize("target", [EffectState.AMBIGUOUS, EffectState.RESERVED])
    def test_only_to_committed_or_failed(self, ambiguous, target):
        with pytest.raises(InvalidArgument):
            ambiguous.resolve_effect(KEY, target, "cli:local")

    def test_a_verdict_bound_to_an_attempt_settles_only_that_attempt(self, ambiguous):
        # attempt 1 resolved, attempt 2 reserved and left AMBIGUOUS: a verdict about attempt 1
        # must not land on attempt 2, which may have executed
        ambiguous.resolve_effect(KEY, EffectState.FAILED, "cli:local")
        start(ambiguous, "act_2")
        finish(ambiguous, "act_2", attempt=2, outcome=EffectState.AMBIGUOUS, error="Timeout")
        with pytest.raises(InvalidArgument, match="attempt 2 now, not attempt 1"):
            ambiguous.resolve_effect(KEY, EffectState.FAILED, "hook", by="reconcile", attempt=1)
        record = ambiguous.get_effect(KEY)
        assert (record.state, record.attempt, record.resolved_by) == (
            EffectState.AMBIGUOUS,
            2,
            None,
        )
        resolved = ambiguous.resolve_effect(KEY, EffectState.FAILED, "hook", attempt=2)
        assert (resolved.state, resolved.attempt) == (EffectState.FAILED, 2)

    def test_only_an_ambiguous_record_resolves(self, store):
        start(store)
        with pytest.raises(InvalidArgument):
            store.resolve_effect(KEY, EffectState.FAILED, "cli:local")
        with pytest.raises(InvalidArgument):
            store.resolve_effect("unknown", EffectState.FAILED, "cli:local")
        assert store.get_effect(KEY).state is EffectState.EXECUTING


class TestApprovals:
    def test_request_grant_consume(self, store):
        record = request_approval(store)
        assert record.status is ApprovalStatus.PENDING
        granted = store.grant_approval("apr_1", "alice@example.com")
        assert granted.status is ApprovalStatus.GRANTED and granted.approver == "alice@example.com"
        started = start(store, approval_id="apr_1", action_hash=HASH)
        assert started.approval.approval_id == "apr_1"
        consumed = store.get_approval("apr_1")
        assert consumed.status is ApprovalStatus.CONSUMED and consumed.consumed_by == "act_1"

    def test_a_consumed_approval_is_refused_before_the_duplicate(self, store):
        request_approval(store)
        store.grant_approval("apr_1", "alice")
        start(store, approval_id="apr_1", action_hash=HASH)
        with pytest.raises(ApprovalMismatch) as caught:
            start(store, "act_2", approval_id="apr_1", action_hash=HASH)
        assert caught.value.reason is MismatchReason.CONSUMED

    def test_a_refused_reservation_leaves_the_approval_granted(self, store):
        start(store, "act_0")
        request_approval(store)
        store.grant_approval("apr_1", "alice")
        with pytest.raises(DuplicateEffect):
            start(store, approval_id="apr_1", action_hash=HASH)
        assert store.get_approval("apr_1").status is ApprovalStatus.GRANTED

    def test_a_different_hash_is_a_mismatch_and_leaves_it_granted(self, store):
        request_approval(store)
        store.grant_approval("apr_1", "alice")
        with pytest.raises(ApprovalMismatch) as caught:
            start(store, approval_id="apr_1", action_hash="sha256:other")
        assert caught.value.reason is MismatchReason.MISMATCH
        assert store.get_approval("apr_1").status is ApprovalStatus.GRANTED

    def test_expiry_at_consumption_is_recorded(self, store, clock):
        request_approval(store)
        store.grant_approval("apr_1", "alice")
        clock.advance(timedelta(minutes=16))
        with pytest.raises(ApprovalMismatch) as caught:
            start(store, approval_id="apr_1", action_hash=HASH)
        assert caught.value.reason is MismatchReason.EXPIRED
        assert store.get_approval("apr_1").status is ApprovalStatus.EXPIRED
        assert store.get_effect(KEY) is None

    def test_expiry_at_answer_is_recorded(self, store, clock):
        request_approval(store)
        clock.advance(timedelta(minutes=16))
        with pytest.raises(ApprovalMismatch):
            store.grant_approval("apr_1", "alice")
        assert store.get_approval("apr_1").status is ApprovalStatus.EXPIRED

    def test_deny_then_present_denies_the_action(self, store):
        request_approval(store)
        store.deny_approval("apr_1", "alice")
        with pytest.raises(ActionDenied) as caught:
            start(store, approval_id="apr_1", action_hash=HASH)
        assert caught.value.reason is DenyReason.APPROVAL_DENIED
        with pytest.raises(ApprovalMismatch) as answered:
            store.grant_approval("apr_1", "bob")
        assert answered.value.reason is MismatchReason.ANSWERED

    def test_unknown_and_bad_approver(self, store):
        with pytest.raises(ApprovalMismatch):
            store.grant_approval("apr_nope", "alice")
        request_approval(store)
        with pytest.raises(InvalidArgument):
            store.grant_approval("apr_1", "two\nlines")

    def test_listing_by_status(self, store):
        request_approval(store, "apr_1")
        request_approval(store, "apr_2", action_hash="sha256:" + "b" * 64)
        store.grant_approval("apr_2", "alice")
        assert [a.approval_id for a in store.list_approvals(ApprovalStatus.PENDING)] == ["apr_1"]
        assert len(store.list_approvals()) == 2


class TestEvidence:
    def test_events_are_ordered_and_filterable(self, store):
        start(store, events=(EventDraft(EventType.ACTION_PROPOSED, "act_1", data={"x": 1}),))
        finish(store, events=(EventDraft(EventType.EXECUTION_COMMITTED, "act_1", KEY),))
        types = [e.type for e in store.events("act_1")]
        assert types == [
            EventType.ACTION_PROPOSED,
            EventType.EFFECT_RESERVED,
            EventType.EXECUTION_STARTED,
            EventType.EXECUTION_COMMITTED,
        ]
        ids = [e.event_id for e in store.events()]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)

    def test_each_protected_step_is_one_transaction(self, store):
        before = store.write_transactions
        start(store)
        finish(store)
        assert store.write_transactions - before == 2

    def test_receipts_chain_and_survive_reopen(self, store, backend):
        for index in range(3):
            store.record((), {"receipt_id": f"rcp_{index}", "action_id": "a", "result": "denied"})
        again = backend.open()
        assert [r.seq for r in again.receipts()] == [1, 2, 3]
        assert again.verify_chain().ok and again.chain_head().seq == 3


class TestExtensionPoint:
    def test_transact_commits_work_and_read_sees_it(self, store, backend):
        from ctrlrun.store.ops.evidence import append_events_in_txn

        store.transact(
            lambda txn: append_events_in_txn(txn, [EventDraft(EventType.ACTION_PROPOSED, "act_x")])
        )
        assert store.read(lambda txn: txn.all("event_list", {}))[0]["action_id"] == "act_x"
        assert store.dialect == backend.name

    def test_transact_rolls_back_on_error(self, store):
        from ctrlrun.store.ops.evidence import append_events_in_txn

        def work(txn):
            append_events_in_txn(txn, [EventDraft(EventType.ACTION_PROPOSED, "act_y")])
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            store.transact(work)
        assert store.events() == ()


class TestApprovalReuse:
    def test_an_identical_pending_request_is_returned_not_duplicated(self, store):
        first = request_approval(store, "apr_1")
        again = request_approval(store, "apr_2")
        assert again.approval_id == "apr_1" == first.approval_id
        assert [a.approval_id for a in store.list_approvals()] == ["apr_1"]
        reused = [e for e in store.events() if e.type is EventType.APPROVAL_REUSED]
        assert [e.approval_id for e in reused] == ["apr_1"]

    def test_another_policy_or_an_expired_request_makes_a_new_one(self, store, clock):
        request_approval(store, "apr_1", ttl=timedelta(seconds=5))
        other = ApprovalRequestDraft("apr_2", {"action_id": "act_0"}, HASH, "sha256:other")
        assert store.put_approval_request(other).approval_id == "apr_2"
        clock.advance(timedelta(seconds=6))
        assert request_approval(store, "apr_3").approval_id == "apr_3"

    def test_find_approvals_lists_every_status_for_one_action(self, store):
        request_approval(store, "apr_1")
        store.grant_approval("apr_1", "alice")
        request_approval(store, "apr_2", action_hash="sha256:" + "b" * 64)
        found = store.find_approvals(HASH, "sha256:policy")
        assert [(a.approval_id, a.status) for a in found] == [("apr_1", ApprovalStatus.GRANTED)]
