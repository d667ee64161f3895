"""The durable kernel's pure decisions: backoff, settlements, plan hashes and checks, reaping."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from ctrlrun.errors import InvalidArgument, PlanReason
from ctrlrun.kernel.evidence_text import result_json
from ctrlrun.kernel.operation import Operation, OperationStatus, ReapAction, plan_reap, start_token
from ctrlrun.kernel.outbox import (
    Backoff,
    Message,
    MessageStatus,
    OnUnknown,
    Outcome,
    delivery_token,
    plan_lapsed,
    plan_settlement,
)
from ctrlrun.kernel.plan import (
    PlanRecord,
    PlanStatus,
    PlanStep,
    StepResult,
    freeze_steps,
    plan_answer,
    plan_claim,
    plan_hash,
    step_receipt_document,
)
from ctrlrun.kernel.receipt import GENESIS_HEAD, ChainHead, chain_receipt

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


class TestBackoff:
    def test_doubles_from_the_base_up_to_the_cap(self):
        backoff = Backoff(base=timedelta(seconds=1), cap=timedelta(seconds=30))
        assert [backoff.ceiling(n).total_seconds() for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
        assert backoff.ceiling(10_000) == timedelta(seconds=30)  # no overflow

    def test_equal_jitter_stays_within_half_and_whole(self):
        backoff = Backoff(base=timedelta(seconds=8))
        assert backoff.delay(1, 0.0) == timedelta(seconds=4)
        assert backoff.delay(1, 1.0) == timedelta(seconds=8)
        assert backoff.delay(2, 0.5) == timedelta(seconds=12)
        with pytest.raises(InvalidArgument):
            backoff.delay(1, 1.5)

    @pytest.mark.parametrize(
        "kwargs", [{"base": timedelta(0)}, {"factor": 0}, {"cap": timedelta(milliseconds=1)}]
    )
    def test_refuses_nonsense(self, kwargs):
        with pytest.raises(InvalidArgument):
            Backoff(**kwargs)


class TestSettlement:
    def settle(self, outcome, attempts=1, on_unknown=OnUnknown.RETRY):
        return plan_settlement(
            outcome,
            attempts=attempts,
            max_attempts=3,
            on_unknown=on_unknown,
            backoff=Backoff(),
            fraction=1.0,
            now=NOW,
            error="e",
        )

    def test_every_outcome(self):
        assert self.settle(Outcome.SENT).status is MessageStatus.SENT
        assert self.settle(Outcome.REJECTED).status is MessageStatus.FAILED
        retry = self.settle(Outcome.NOT_EXECUTED, attempts=2)
        assert (retry.status, retry.next_attempt_at) == (
            MessageStatus.PENDING,
            NOW + timedelta(seconds=2),
        )
        assert self.settle(Outcome.UNKNOWN).status is MessageStatus.PENDING
        assert self.settle(Outcome.UNKNOWN, on_unknown=OnUnknown.PARK).status is (
            MessageStatus.AMBIGUOUS
        )
        assert self.settle(Outcome.NOT_EXECUTED, attempts=3).status is MessageStatus.DEAD
        # parking wins over the attempt ceiling: an unknown is never silently dead
        assert self.settle(Outcome.UNKNOWN, attempts=3, on_unknown=OnUnknown.PARK).status is (
            MessageStatus.AMBIGUOUS
        )

    def test_a_lapsed_claim(self):
        message = Message(
            "m",
            "t",
            {},
            None,
            MessageStatus.PROCESSING,
            1,
            NOW,
            NOW,
            NOW,
            lease_expires_at=NOW,
            claimed_by="w",
        )
        assert plan_lapsed(message, max_attempts=3, on_unknown=OnUnknown.RETRY).status is (
            MessageStatus.PENDING
        )
        assert plan_lapsed(message, max_attempts=1, on_unknown=OnUnknown.RETRY).status is (
            MessageStatus.DEAD
        )
        parked = plan_lapsed(message, max_attempts=3, on_unknown=OnUnknown.PARK)
        assert parked.status is MessageStatus.AMBIGUOUS and "lapsed" in parked.error

    def test_tokens_are_stable_and_distinct(self):
        assert delivery_token("m1") == delivery_token("m1") != delivery_token("m2")
        assert start_token("op1") == start_token("op1") != delivery_token("op1")


def record(steps, **changes):
    frozen = freeze_steps(steps)
    base = PlanRecord(
        "p",
        plan_hash(frozen),
        frozen,
        "agent",
        None,
        PlanStatus.PENDING,
        NOW,
        NOW + timedelta(hours=1),
    )
    return replace(base, **changes)


STEPS = [{"action": "a.one", "arguments": {"n": 1}}, {"action": "a.two", "arguments": {}}]


class TestPlans:
    def test_the_hash_covers_names_arguments_and_order(self):
        one = plan_hash(freeze_steps(STEPS))
        assert one == plan_hash(freeze_steps([PlanStep("a.one", {"n": 1}), PlanStep("a.two", {})]))
        assert one != plan_hash(freeze_steps(list(reversed(STEPS))))
        assert one != plan_hash(
            freeze_steps([{"action": "a.one", "arguments": {"n": 2}}, STEPS[1]])
        )

    @pytest.mark.parametrize(
        "steps",
        [
            [],
            [{"action": "bad name", "arguments": {}}],
            [{"action": "a.x", "arguments": {"f": 1.5}}],
            [{"action": "a.x"}],
        ],
    )
    def test_bad_steps_are_refused(self, steps):
        with pytest.raises(InvalidArgument):
            freeze_steps(steps)

    def test_answer_checks_in_order(self):
        plan = record(STEPS)
        assert plan_answer(None, plan_id="p", presented_hash="x", now=NOW).refusal.reason is (
            PlanReason.UNKNOWN
        )
        drifted = replace(plan, steps=freeze_steps(STEPS[:1]))
        assert (
            plan_answer(drifted, plan_id="p", presented_hash=plan.plan_hash, now=NOW).refusal.reason
            is PlanReason.TAMPERED
        )
        assert (
            plan_answer(plan, plan_id="p", presented_hash="sha256:x", now=NOW).refusal.reason
            is PlanReason.HASH_MISMATCH
        )
        late = plan_answer(
            plan, plan_id="p", presented_hash=plan.plan_hash, now=NOW + timedelta(hours=2)
        )
        assert late.refusal.reason is PlanReason.EXPIRED and late.expire
        assert (
            plan_answer(plan, plan_id="p", presented_hash=plan.plan_hash, now=NOW).refusal is None
        )

    def test_claim(self):
        plan = record(STEPS, status=PlanStatus.APPROVED)
        plan = replace(plan, approved_hash=plan.plan_hash)
        assert plan_claim(plan, plan_id="p", now=NOW).refusal is None
        later = NOW + timedelta(hours=2)
        assert plan_claim(plan, plan_id="p", now=later).expire
        resumed = replace(plan, started_at=NOW)
        assert plan_claim(resumed, plan_id="p", now=later).refusal is None  # no clock expiry
        busy = replace(plan, status=PlanStatus.EXECUTING)
        assert plan_claim(busy, plan_id="p", now=NOW).refusal.reason is PlanReason.BUSY
        other = replace(plan, approved_hash="sha256:other")
        assert plan_claim(other, plan_id="p", now=NOW).refusal.reason is PlanReason.TAMPERED

    def test_heartbeat_and_fence(self):
        plan = record(
            STEPS,
            status=PlanStatus.EXECUTING,
            claim_epoch=2,
            claimed_by="w",
            heartbeat_expires_at=NOW,
        )
        assert not plan.heartbeat_lapsed(NOW) and plan.heartbeat_lapsed(NOW + timedelta(1))
        assert plan.held_by("w", 2) and not plan.held_by("w", 1) and not plan.held_by("v", 2)


def test_reap_never_restarts():
    running = Operation(
        "o",
        "k",
        "r",
        {},
        None,
        OperationStatus.RUNNING,
        NOW,
        NOW,
        claim_epoch=1,
        claimed_by="w",
        lease_expires_at=NOW,
    )
    assert plan_reap(running, NOW) is None
    later = NOW + timedelta(seconds=1)
    assert plan_reap(running, later) is ReapAction.RECONCILE
    assert plan_reap(replace(running, remote_id="x"), later) is ReapAction.RELEASE
    assert plan_reap(replace(running, status=OperationStatus.QUEUED), later) is None
    assert plan_reap(replace(running, lease_expires_at=None), later) is None


class TestStepReceipt:
    """A step's receipt is composed from parts; its bytes must be exactly the validating
    encode's, for every shape of output ``result_json`` can give the runner."""

    @pytest.mark.parametrize(
        "value",
        [
            None,
            {"reserved": 2},
            [1, "two", None, True, {"nested": ["é", "\u2028", "\ud83d\ude00"]}],
            "plain text",
            1.5,  # no canonical form: result_json falls back to {"repr": ...}
            object(),
        ],
    )
    @pytest.mark.parametrize("user", [None, "alice"])
    def test_its_text_is_the_validating_encode(self, value, user):
        import json

        plan = replace(
            record(
                [{"action": "a.one", "arguments": {"z": [1, {"b": None, "a": "é"}], "n": 1}}],
                status=PlanStatus.EXECUTING,
                claim_epoch=3,
            ),
            user=user,
            approver="bob",
        )
        text = result_json(value)
        draft = step_receipt_document(
            plan,
            step_index=0,
            result=StepResult.OK,
            output=None if text is None else json.loads(text),
            error="an 'error' \\ with \"quotes\"",
            effect_key=None,
            receipt_id="rcp_1",
            finished_at="2026-01-01T12:00:00.000000Z",
        )
        for head in (GENESIS_HEAD, ChainHead(41, "sha256:" + "ab" * 32)):
            assert chain_receipt(draft, head) == chain_receipt(dict(draft), head)


def test_a_receipt_of_values_without_a_plain_form_takes_the_validating_encode():
    """A step built by hand with an OrderedDict for arguments, and one as output (mappings,
    but not exact dicts): neither has a precomposed text, and the receipt is still what the
    validating encoder writes."""
    from collections import OrderedDict

    plan = replace(
        record([{"action": "a.one", "arguments": {"n": 1}}], status=PlanStatus.EXECUTING),
        steps=(PlanStep("a.one", OrderedDict(pair=[1, 2])),),
    )
    draft = step_receipt_document(
        plan,
        step_index=0,
        result=StepResult.OK,
        output=OrderedDict(b=1, a="x"),
        error=None,
        effect_key=None,
        receipt_id="rcp_1",
        finished_at="2026-01-01T12:00:00.000000Z",
    )
    assert chain_receipt(draft, GENESIS_HEAD) == chain_receipt(dict(draft), GENESIS_HEAD)
    assert '"pair":[1,2]' in chain_receipt(draft, GENESIS_HEAD)[1]


class TestRefusalsAtTheEdges:
    """Every refusal of the durable kernels' small helpers: typed, with the reason named."""

    def test_tokens_need_an_id_and_an_operation_knows_its_own(self):
        for token in (start_token, delivery_token):
            for bad in ("", None):
                with pytest.raises(InvalidArgument, match="non-empty string"):
                    token(bad)
        operation = Operation("op_1", "k", "r", {}, None, OperationStatus.QUEUED, NOW, NOW)
        assert operation.start_token == start_token("op_1") != start_token("op_2")

    def test_only_a_parked_or_dead_message_resolves_and_only_to_a_resolvable_status(self):
        from ctrlrun.kernel.outbox import check_resolution

        parked = Message("m", "t", {}, None, MessageStatus.AMBIGUOUS, 1, NOW, NOW, NOW)
        dead = replace(parked, status=MessageStatus.DEAD)
        for target in (MessageStatus.SENT, MessageStatus.FAILED, MessageStatus.PENDING):
            check_resolution(parked, "m", target)
            check_resolution(dead, "m", target)
        with pytest.raises(InvalidArgument, match="resolves to sent, failed or pending"):
            check_resolution(parked, "m", MessageStatus.DEAD)
        with pytest.raises(InvalidArgument, match="no outbox message m"):
            check_resolution(None, "m", MessageStatus.SENT)
        for status in (MessageStatus.SENT, MessageStatus.PENDING, MessageStatus.PROCESSING):
            with pytest.raises(InvalidArgument, match=f"is {status}, not ambiguous or dead"):
                check_resolution(replace(parked, status=status), "m", MessageStatus.SENT)

    def test_a_step_whose_arguments_are_not_a_mapping_is_refused(self):
        with pytest.raises(InvalidArgument, match="step 1: arguments must be a mapping"):
            freeze_steps([PlanStep("a.b", {}), {"action": "a.c", "arguments": [1, 2]}])

    def test_claiming_an_unknown_plan_is_refused_as_unknown(self):
        decision = plan_claim(None, plan_id="pln_x", now=NOW)
        assert decision.refusal is not None and decision.refusal.reason is PlanReason.UNKNOWN
        assert not decision.expire
