"""The re-read's judgement, with held values (no server): whole-row identity, never the
action_id alone; the pre-state means "did not land"; anything else goes to the planner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctrlrun.errors import (
    AmbiguityReason,
    AmbiguousEffect,
    AmbiguousWrite,
    ApprovalMismatch,
    DuplicateEffect,
    DuplicateState,
    InvalidArgument,
    MismatchReason,
)
from ctrlrun.store.postgres.witness import Verdict, Witness, refusal

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LEASE = NOW + timedelta(minutes=5)
INSERT = {
    "effect_key": "refund:p",
    "state": "executing",
    "action_id": "act_1",
    "attempt": 1,
    "created_at": NOW,
    "updated_at": NOW,
    "lease_expires_at": LEASE,
    "write_token": "ours",
}
MOVE = {
    "effect_key": "refund:p",
    "state": "committed",
    "updated_at": NOW + timedelta(seconds=1),
    "lease_expires_at": None,
    "result_json": '{"ok":1}',
    "error": None,
    "resolved_by": None,
    "from_state": "executing",
    "action_id": "act_1",
    "attempt": 1,
    "write_token": "ours-2",
}


def row(**changes):
    base = {**INSERT, "result_json": None, "error": None, "resolved_by": None}
    base["committed_receipt_id"] = None
    return {**base, **changes}


def evidence(*writes):
    witness = Witness()
    for query, params in writes:
        witness.saw(query, params, 1)
    found = witness.evidence()
    assert found is not None
    return found


class TestReservationInsert:
    def test_our_row_column_for_column_is_ours(self):
        found = evidence(("effect_insert", INSERT))
        assert found.judge(row()) is Verdict.LANDED and found.branch(Verdict.LANDED) == "A1_OURS"

    def test_no_row_means_it_did_not_land(self):
        found = evidence(("effect_insert", INSERT))
        assert found.judge(None) is Verdict.NOT_LANDED
        assert found.branch(Verdict.NOT_LANDED) == "A1_REINSERT"

    def test_a_twin_wearing_our_action_id_with_identical_columns_is_not_ours(self):
        """Two attempts can share an action_id (and, with a frozen clock, every column)."""
        found = evidence(("effect_insert", INSERT))
        twin = row(write_token="theirs")
        assert found.judge(twin) is Verdict.OTHER and found.branch(Verdict.OTHER) == "A1_REFUSE"
        refused = refusal(found, twin, NOW, lambda v: v)
        assert isinstance(refused, DuplicateEffect)
        assert refused.state is DuplicateState.IN_PROGRESS

    @pytest.mark.parametrize(
        "changes",
        [{"attempt": 2}, {"lease_expires_at": LEASE + timedelta(1)}, {"error": "x"}],
    )
    def test_any_other_column_that_differs_is_not_ours(self, changes):
        assert evidence(("effect_insert", INSERT)).judge(row(**changes)) is Verdict.OTHER

    def test_the_planner_refuses_what_it_finds_and_never_grants(self):
        found = evidence(("effect_insert", INSERT))
        ambiguous = row(state="ambiguous", write_token="theirs", lease_expires_at=None)
        assert isinstance(refusal(found, ambiguous, NOW, lambda v: v), AmbiguousEffect)
        failed = row(state="failed", write_token="theirs")  # the planner would renew it
        refused = refusal(found, failed, NOW, lambda v: v)
        assert isinstance(refused, DuplicateEffect)
        assert refused.state is DuplicateState.IN_PROGRESS


class TestTransitions:
    def test_landed_unchanged_and_moved(self):
        found = evidence(("effect_move", MOVE))
        landed = row(
            state="committed",
            updated_at=MOVE["updated_at"],
            lease_expires_at=None,
            result_json='{"ok":1}',
            write_token="ours-2",
        )
        assert found.judge(landed) is Verdict.LANDED
        assert found.branch(Verdict.LANDED) == "A2_LANDED"
        assert found.judge(row()) is Verdict.NOT_LANDED  # still executing, ours: re-issue
        assert found.branch(Verdict.NOT_LANDED) == "A2_REISSUE"
        moved = row(state="ambiguous", write_token="theirs", lease_expires_at=None)
        assert found.judge(moved) is Verdict.OTHER
        assert isinstance(refusal(found, moved, NOW, lambda v: v), AmbiguousEffect)
        assert isinstance(refusal(found, None, NOW, lambda v: v), InvalidArgument)

    def test_a_renewal_is_a_transition(self):
        renew = {**INSERT, "attempt": 2, "action_id": "act_2", "from_attempt": 1}
        found = evidence(("effect_renew", renew))
        assert found.family == "A2"
        assert found.judge(row(state="failed")) is Verdict.NOT_LANDED
        assert found.judge(row(attempt=2, action_id="act_2")) is Verdict.LANDED

    def test_first_pre_state_and_last_post_state(self):
        second = {**MOVE, "from_state": "committed", "state": "failed", "write_token": "t3"}
        found = evidence(("effect_move", MOVE), ("effect_move", second))
        assert found.first.params is not found.last.params
        assert found.judge(row()) is Verdict.NOT_LANDED
        assert found.judge(row(state="committed", write_token="ours-2")) is Verdict.OTHER


class TestOtherWitnesses:
    def test_the_effect_row_settles_first_then_the_approval_then_the_receipt(self):
        consume = {"approval_id": "apr_1", "consumed_at": NOW, "consumed_by": "act_1"}
        receipt = {"receipt_id": "r", "seq": 1, "document": "{}", "hash": "h"}
        witness = Witness()
        witness.saw("receipt_insert", receipt, 1)
        witness.saw("approval_consume", consume, 1)
        assert witness.evidence().kind == "approval"
        witness.saw("effect_insert", INSERT, 1)
        assert witness.evidence().kind == "effect"
        empty = Witness()
        empty.saw("event_insert", {}, 1)
        empty.saw("effect_insert", INSERT, 0)  # matched nothing: not a witness
        assert empty.evidence() is None

    def test_an_outcome_carries_its_receipt_as_corroboration(self):
        # the effect row can move on after the COMMIT landed; the receipt cannot
        receipt = {"receipt_id": "r", "seq": 1, "document": "{}", "hash": "h"}
        found = evidence(("effect_move", MOVE), ("receipt_insert", receipt))
        assert found.kind == "effect" and found.corroboration is not None
        assert found.corroboration.kind == "receipt"
        assert found.corroboration.judge({**receipt}) is Verdict.LANDED
        assert found.corroboration.judge(None) is Verdict.NOT_LANDED
        assert evidence(("effect_move", MOVE)).corroboration is None
        assert evidence(("receipt_insert", receipt)).corroboration is None

    def test_an_approval_answered_by_someone_else_is_refused_as_answered(self):
        answer = {"approval_id": "apr_1", "status": "granted", "approver": "a", "answered_at": NOW}
        found = evidence(("approval_answer", answer))
        other = {
            "approval_id": "apr_1",
            "action_hash": "h",
            "action_json": "{}",
            "policy_hash": "p",
            "status": "denied",
            "created_at": NOW,
            "expires_at": LEASE,
            "approver": "b",
            "answered_at": NOW,
            "consumed_at": None,
            "consumed_by": None,
            "required": 1,
            "excluded_json": "[]",
        }
        assert found.judge({**other, "status": "pending"}) is Verdict.NOT_LANDED
        assert found.judge(other) is Verdict.OTHER
        refused = refusal(found, other, NOW, lambda v: v)
        assert isinstance(refused, ApprovalMismatch)
        assert refused.reason is MismatchReason.ANSWERED

    def test_a_receipt_that_is_not_ours_is_unrecognised(self):
        receipt = {"receipt_id": "r", "seq": 1, "document": "{}", "hash": "h"}
        found = evidence(("receipt_insert", receipt))
        assert found.judge({**receipt}) is Verdict.LANDED
        assert found.judge({**receipt, "hash": "other"}) is Verdict.OTHER
        assert isinstance(refusal(found, {}, NOW, lambda v: v), AmbiguousWrite)


def test_an_approval_spent_by_someone_else_is_refused_as_consumed():
    consume = {"approval_id": "apr_1", "consumed_at": NOW, "consumed_by": "act_1"}
    found = evidence(("approval_consume", consume))
    other = {"approval_id": "apr_1", "status": "consumed", "consumed_at": NOW, "consumed_by": "x"}
    assert found.judge({**other, "status": "granted"}) is Verdict.NOT_LANDED
    assert found.judge({**other, "consumed_by": "act_1"}) is Verdict.LANDED
    assert found.judge(other) is Verdict.OTHER
    refused = refusal(found, {**_approval_row(), **other}, NOW, lambda v: v)
    assert isinstance(refused, ApprovalMismatch) and refused.reason is MismatchReason.CONSUMED


def _approval_row():
    return {
        "action_hash": "h",
        "action_json": "{}",
        "policy_hash": "p",
        "created_at": NOW,
        "expires_at": LEASE,
        "approver": "a",
        "answered_at": NOW,
        "required": 1,
        "excluded_json": "[]",
    }


SAVE = {
    "doc_id": "d",
    "version": 3,
    "expected_version": 2,
    "content": '{"n":3}',
    "content_hash": "sha256:three",
    "saved_at": NOW,
    "writer": "alice/tab",
}


def _document(**changes):
    base = {
        "doc_id": "d",
        "kind": "json",
        "version": 3,
        "content": '{"n":3}',
        "content_hash": "sha256:three",
        "created_at": NOW - timedelta(hours=1),
        "updated_at": NOW,
        "updated_by": "alice/tab",
    }
    return {**base, **changes}


class TestDocuments:
    def test_a_save_is_ours_by_version_digest_writer_and_instant(self):
        found = evidence(("document_update", SAVE), ("document_version_insert", SAVE))
        assert (found.kind, found.read_query, found.read_params) == (
            "document",
            "document_get",
            {"doc_id": "d"},
        )
        assert found.judge(_document()) is Verdict.LANDED
        assert found.branch(Verdict.LANDED) == "A2_LANDED"

    def test_still_at_the_base_version_did_not_land(self):
        found = evidence(("document_update", SAVE))
        assert found.judge(_document(version=2, content_hash="sha256:two")) is Verdict.NOT_LANDED

    @pytest.mark.parametrize(
        "changes",
        [
            {"version": 4, "content_hash": "sha256:four"},  # ours may lie underneath
            {"updated_by": "bob/tab"},  # another writer's save of the same content
            {"updated_at": NOW + timedelta(microseconds=1)},
        ],
    )
    def test_anything_else_is_unknown_never_a_conflict_or_a_success(self, changes):
        found = evidence(("document_update", SAVE))
        moved = _document(**changes)
        assert found.judge(moved) is Verdict.OTHER
        unknown = refusal(found, moved, NOW, lambda v: v)
        assert (
            isinstance(unknown, AmbiguousWrite) and unknown.reason is AmbiguityReason.UNRECOGNISED
        )

    def test_a_create_is_an_insert(self):
        create = {**SAVE, "kind": "json"}
        del create["version"], create["expected_version"]
        found = evidence(("document_insert", create))
        assert found.family == "A1"
        assert found.judge(None) is Verdict.NOT_LANDED
        assert found.judge(_document(version=1)) is Verdict.LANDED
        assert found.judge(_document(version=1, kind="json-object")) is Verdict.OTHER


SETTLE = {"message_id": "msg_1", "attempts": 2, "status": "sent", "error": None, "now": NOW}


def _message(**changes):
    base = {
        "message_id": "msg_1",
        "status": "sent",
        "attempts": 2,
        "last_error": None,
        "lease_expires_at": None,
    }
    return {**base, **changes}


class TestOutboxSettle:
    def test_settled_by_this_claim_still_processing_or_moved_on(self):
        found = evidence(("outbox_settle", SETTLE))
        assert found.kind == "outbox" and found.family == "A2"
        assert found.judge(_message()) is Verdict.LANDED
        assert found.judge(_message(status="processing", lease_expires_at=LEASE)) is (
            Verdict.NOT_LANDED
        )
        reclaimed = _message(status="processing", attempts=3, lease_expires_at=LEASE)
        assert found.judge(reclaimed) is Verdict.OTHER
        assert isinstance(refusal(found, reclaimed, NOW, lambda v: v), AmbiguousWrite)

    def test_a_claim_that_reclaimed_several_messages_is_judged_on_one(self):
        other = {**SETTLE, "message_id": "msg_2", "status": "pending", "error": "lapsed"}
        found = evidence(("outbox_settle", SETTLE), ("outbox_settle", other))
        assert found.read_params == {"message_id": "msg_1"}
        assert found.last.params["message_id"] == "msg_1"
        assert found.judge(_message()) is Verdict.LANDED
