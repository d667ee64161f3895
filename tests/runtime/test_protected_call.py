"""A protected call end to end: decide, approve, reserve, execute, record."""

from __future__ import annotations

from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import (
    ActionDenied,
    AmbiguousEffect,
    ApprovalMismatch,
    ApprovalRequired,
    ApprovalStatus,
    DenyReason,
    DuplicateEffect,
    DuplicateState,
    EffectKeyError,
    EffectState,
    EventType,
    InvalidArgument,
    MismatchReason,
    NotExecuted,
    StoreError,
)


def receipts(store):
    return [r.document for r in store.receipts()]


def event_types(store, action_id=None):
    return [e.type for e in store.events(action_id)]


class TestHappyPath:
    def test_a_call_commits_once_and_leaves_one_receipt(self, refund, remote, store):
        with ctrlrun.context("support-bot", "alice"):
            assert refund("pay_1", 5000) == {"ok": True, "n": 1}
        assert remote.calls == [{"payment_id": "pay_1", "amount": 5000, "currency": "eur"}]
        record = store.get_effect("refund:pay_1")
        assert record.state is EffectState.COMMITTED and record.attempt == 1
        [receipt] = receipts(store)
        assert receipt["result"] == "committed" and receipt["decision"] == "allow"
        assert receipt["decision_reason"] == "rule[0]" and receipt["effect_key"] == "refund:pay_1"
        assert receipt["principal"] == {"agent": "support-bot", "user": "alice"}
        assert receipt["arguments"] == {"payment_id": "pay_1", "amount": 5000, "currency": "eur"}
        assert receipt["policy_hash"].startswith("sha256:") and receipt["seq"] == 1
        assert event_types(store) == [
            EventType.ACTION_PROPOSED,
            EventType.POLICY_EVALUATED,
            EventType.EFFECT_RESERVED,
            EventType.EXECUTION_STARTED,
            EventType.EXECUTION_COMMITTED,
        ]

    def test_the_happy_path_costs_two_write_transactions(self, refund, store):
        with ctrlrun.context("bot"):
            refund("pay_warm", 1)
            before = store.write_transactions
            refund("pay_1", 5000)
        assert store.write_transactions - before == 2

    def test_a_call_without_an_effect_also_costs_two(self, control, store):
        @ctrlrun.protect("crm.read", control=control)
        def read(customer: str):
            return customer

        with ctrlrun.context("bot"):
            before = store.write_transactions
            assert read("c_1") == "c_1"
        assert store.write_transactions - before == 2
        assert receipts(store)[0]["effect_key"] is None

    def test_the_executor_receives_canonical_arguments(self, control):
        seen = []

        @ctrlrun.protect("crm.read", control=control)
        def read(items: tuple):
            seen.append(items)

        with ctrlrun.context("bot"):
            read((1, (2, 3)))
        assert seen == [[1, [2, 3]]]

    def test_the_idempotency_token_is_the_attempts(self, control):
        tokens = []

        @ctrlrun.protect("stripe.refund", control=control)
        def refund(payment_id: str, amount: int):
            tokens.append(ctrlrun.idempotency_token())

        with ctrlrun.context("bot"):
            refund("pay_1", 1)
        assert tokens == [ctrlrun.idempotency_token_for("refund:pay_1", 1)]
        with pytest.raises(InvalidArgument):
            ctrlrun.idempotency_token()

    def test_control_execute_returns_the_receipt(self, control, remote, store):
        action = ctrlrun.Action("email.send", {"to": "a@b.c"}, ctrlrun.Principal("bot"))
        receipt = control.execute(action, remote, effect_key="email:1")
        assert receipt.document["result"] == "committed"
        assert store.get_effect("email:1").state is EffectState.COMMITTED


class TestLostResponse:
    def test_an_unknown_outcome_is_ambiguous_and_blocks_a_blind_retry(self, refund, remote, store):
        remote.fail_with.append(TimeoutError("read timed out after the remote committed"))
        with ctrlrun.context("bot"), pytest.raises(TimeoutError):
            refund("pay_1", 5000)
        assert store.get_effect("refund:pay_1").state is EffectState.AMBIGUOUS
        with ctrlrun.context("bot"), pytest.raises(AmbiguousEffect) as caught:
            refund("pay_1", 5000)
        assert caught.value.effect_key == "refund:pay_1"
        assert len(remote.calls) == 1
        assert [r["result"] for r in receipts(store)] == ["ambiguous", "blocked"]

    @pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(1), RuntimeError("x")])
    def test_anything_but_not_executed_is_ambiguous_and_reraised(self, refund, remote, store, exc):
        remote.fail_with.append(exc)
        with ctrlrun.context("bot"), pytest.raises(type(exc)):
            refund("pay_1", 5000)
        assert store.get_effect("refund:pay_1").state is EffectState.AMBIGUOUS
        assert receipts(store)[0]["error"].startswith(type(exc).__name__)

    def test_not_executed_fails_and_the_retry_is_attempt_two(self, refund, remote, store):
        remote.fail_with.append(NotExecuted("connection refused before sending"))
        with ctrlrun.context("bot"), pytest.raises(NotExecuted):
            refund("pay_1", 5000)
        assert store.get_effect("refund:pay_1").state is EffectState.FAILED
        with ctrlrun.context("bot"):
            refund("pay_1", 5000)
        record = store.get_effect("refund:pay_1")
        assert (record.state, record.attempt) == (EffectState.COMMITTED, 2)
        assert [(r["result"], r["attempt"]) for r in receipts(store)] == [
            ("failed", 1),
            ("committed", 2),
        ]
        assert len(store.list_effects()) == 1

    def test_the_attempt_ceiling_refuses_before_the_executor(self, control, remote, store):
        @ctrlrun.protect("billing.charge", control=control)
        def charge(charge_id: str):
            return remote(charge_id=charge_id)

        remote.fail_with.extend([NotExecuted(), NotExecuted()])
        with ctrlrun.context("bot"):
            for _ in range(2):
                with pytest.raises(NotExecuted):
                    charge("ch_1")
            with pytest.raises(ActionDenied) as caught:
                charge("ch_1")
        assert caught.value.reason is DenyReason.ATTEMPT_CEILING
        assert len(remote.calls) == 2 and receipts(store)[-1]["result"] == "blocked"

    def test_a_store_failure_is_never_read_as_not_executed(
        self, refund, remote, store, monkeypatch
    ):
        def broken(_request):
            raise StoreError("disk I/O error")

        monkeypatch.setattr(store, "finish_action", broken)
        with ctrlrun.context("bot"), pytest.raises(StoreError):
            refund("pay_1", 5000)
        assert len(remote.calls) == 1
        assert store.get_effect("refund:pay_1").state is EffectState.EXECUTING


class TestLeases:
    def test_an_expired_lease_is_ambiguous_on_contention_and_nothing_sweeps(
        self, control, store, clock
    ):
        action = ctrlrun.Action(
            "stripe.refund", {"payment_id": "p", "amount": 1}, ctrlrun.Principal("bot")
        )
        store.start_action(
            ctrlrun.store.StartRequest(action_id="act_crashed", effect_key="refund:p")
        )
        clock.advance(timedelta(hours=1))
        assert store.get_effect("refund:p").state is EffectState.EXECUTING
        with pytest.raises(AmbiguousEffect):
            control.execute(action, lambda **_: None)
        assert store.get_effect("refund:p").state is EffectState.AMBIGUOUS

    def test_an_outcome_after_the_lease_was_taken_is_recorded_ambiguous(
        self, control, store, clock
    ):
        principal = ctrlrun.Principal("bot")

        def slow(**_):
            clock.advance(timedelta(minutes=10))
            other = ctrlrun.Action("stripe.refund", {"payment_id": "p", "amount": 1}, principal)
            with pytest.raises(AmbiguousEffect):
                control.execute(other, lambda **_: None)
            return "done"

        action = ctrlrun.Action("stripe.refund", {"payment_id": "p", "amount": 1}, principal)
        with pytest.raises(AmbiguousEffect):
            control.execute(action, slow)
        assert store.get_effect("refund:p").state is EffectState.AMBIGUOUS
        assert [r["result"] for r in receipts(store)] == ["blocked", "ambiguous"]
        assert "outcome committed not recorded" in receipts(store)[-1]["error"]


class TestResolution:
    @pytest.fixture
    def ambiguous(self, refund, remote):
        remote.fail_with.append(TimeoutError())
        with ctrlrun.context("bot"), pytest.raises(TimeoutError):
            refund("pay_1", 5000)

    def test_resolve_failed_permits_a_retry(self, ambiguous, refund, remote, store):
        store.resolve_effect("refund:pay_1", EffectState.FAILED, "cli:local")
        with ctrlrun.context("bot"):
            refund("pay_1", 5000)
        assert store.get_effect("refund:pay_1").attempt == 2 and len(remote.calls) == 2

    def test_resolve_committed_refuses_a_retry(self, ambiguous, refund, remote, store):
        store.resolve_effect("refund:pay_1", EffectState.COMMITTED, "cli:local")
        with ctrlrun.context("bot"), pytest.raises(DuplicateEffect) as caught:
            refund("pay_1", 5000)
        assert caught.value.state is DuplicateState.COMMITTED and len(remote.calls) == 1


class TestReconcile:
    def protected(self, control, remote, hook, calls):
        def counted(key):
            calls.append(key)
            return hook(key)

        @ctrlrun.protect("stripe.refund", control=control, reconcile=counted)
        def refund(payment_id: str, amount: int):
            return remote(payment_id=payment_id)

        remote.fail_with.append(TimeoutError())
        with ctrlrun.context("bot"), pytest.raises(TimeoutError):
            refund("pay_1", 1)
        return refund

    def test_not_executed_unblocks_as_attempt_two(self, control, remote, store):
        calls: list[str] = []
        refund = self.protected(control, remote, lambda _k: "not_executed", calls)
        with ctrlrun.context("bot"):
            refund("pay_1", 1)
        record = store.get_effect("refund:pay_1")
        assert (record.state, record.attempt, calls) == (EffectState.COMMITTED, 2, ["refund:pay_1"])
        assert EventType.RECONCILIATION_RESOLVED in event_types(store)

    def test_committed_refuses_as_duplicate(self, control, remote, store):
        calls: list[str] = []
        refund = self.protected(control, remote, lambda _k: "committed", calls)
        with ctrlrun.context("bot"), pytest.raises(DuplicateEffect):
            refund("pay_1", 1)
        record = store.get_effect("refund:pay_1")
        assert record.state is EffectState.COMMITTED
        assert record.resolved_by == "reconcile:stripe.refund" and len(remote.calls) == 1

    @pytest.mark.parametrize("answer", ["unknown", "maybe", None])
    def test_unknown_or_invalid_changes_nothing(self, control, remote, store, answer):
        calls: list[str] = []
        refund = self.protected(control, remote, lambda _k: answer, calls)
        with ctrlrun.context("bot"), pytest.raises(AmbiguousEffect):
            refund("pay_1", 1)
        assert store.get_effect("refund:pay_1").state is EffectState.AMBIGUOUS
        assert len(calls) == 1 and len(remote.calls) == 1

    def test_a_stale_answer_settles_only_the_attempt_it_was_asked_about(
        self, control, remote, store
    ):
        # The interleaving the soak found, driven from inside the hook: while the hook is asked
        # about attempt 1, a person resolves it, another caller reserves attempt 2 and loses its
        # reply (AMBIGUOUS). The hook's "not_executed" is about attempt 1; applied to attempt 2
        # it would mark FAILED an attempt that executed, and the next caller would run it again.
        calls: list[str] = []

        def hook(key):
            store.resolve_effect(key, EffectState.FAILED, "cli:local")
            remote.fail_with.append(TimeoutError())
            with pytest.raises(TimeoutError):
                refund("pay_1", 1)  # attempt 2: the remote acted, the reply was lost
            return "not_executed"

        refund = self.protected(control, remote, hook, calls)
        with ctrlrun.context("bot"), pytest.raises(AmbiguousEffect):
            refund("pay_1", 1)
        record = store.get_effect("refund:pay_1")
        assert (record.state, record.attempt) == (EffectState.AMBIGUOUS, 2)
        assert len(remote.calls) == 2 and len(calls) == 1  # attempt 2 was never run twice

    @pytest.mark.parametrize(
        ("answer", "transactions", "refused"),
        [
            ("unknown", 1, AmbiguousEffect),  # the refusal: reconcile events, refusal, receipt
            ("committed", 2, DuplicateEffect),  # resolution (+ its events); refusal
            ("not_executed", 3, None),  # resolution (+ its events); reserve; record
        ],
    )
    def test_the_reconciliation_never_writes_a_transaction_of_its_own(
        self, control, remote, store, answer, transactions, refused
    ):
        # A transaction that wrote events alone is the one a lost COMMIT leaves unprovable
        # (Postgres: AmbiguousWrite with nothing to re-read); the reconciliation's events ride
        # with the resolution, or with the call's next transaction.
        refund = self.protected(control, remote, lambda _k: answer, [])
        before = store.write_transactions
        with ctrlrun.context("bot"):
            if refused is None:
                refund("pay_1", 1)
            else:
                with pytest.raises(refused):
                    refund("pay_1", 1)
        assert store.write_transactions - before == transactions
        types = event_types(store)
        started = types.index(EventType.RECONCILIATION_STARTED)
        assert types[started + 1] == EventType.RECONCILIATION_RESOLVED
        assert types.count(EventType.RECONCILIATION_STARTED) == 1
        if answer != "unknown":  # the verdict is stored with the events that explain it
            assert types[started + 2] == EventType.EFFECT_RESOLVED

    def test_a_raising_hook_counts_as_unknown_and_is_asked_once(self, control, remote, store):
        calls: list[str] = []

        def raising(_key):
            raise ConnectionError("provider down")

        refund = self.protected(control, remote, raising, calls)
        with ctrlrun.context("bot"), pytest.raises(AmbiguousEffect):
            refund("pay_1", 1)
        assert len(calls) == 1
        resolved = [e for e in store.events() if e.type is EventType.RECONCILIATION_RESOLVED]
        assert resolved[-1].data["reason"] == "raised"


class TestApprovals:
    def ask(self, refund, amount=200000):
        with ctrlrun.context("bot"), pytest.raises(ApprovalRequired) as caught:
            refund("pay_1", amount)
        return caught.value.request_id

    def test_approval_required_records_a_request_and_no_receipt(self, refund, remote, store):
        request_id = self.ask(refund)
        approval = store.get_approval(request_id)
        assert approval.status is ApprovalStatus.PENDING and approval.action["arguments"]["amount"]
        assert store.receipts() == () and remote.calls == []
        assert EventType.APPROVAL_REQUESTED in event_types(store)

    def test_granted_then_presented_runs_once(self, refund, remote, store):
        request_id = self.ask(refund)
        store.grant_approval(request_id, "alice")
        with ctrlrun.context("bot"), ctrlrun.with_approval(request_id):
            refund("pay_1", 200000)
        assert len(remote.calls) == 1
        receipt = receipts(store)[-1]
        assert receipt["approval_id"] == request_id and receipt["approver"] == "alice"
        assert store.get_approval(request_id).status is ApprovalStatus.CONSUMED

    def test_a_mutated_action_is_refused_and_the_approval_stays_granted(
        self, refund, remote, store
    ):
        request_id = self.ask(refund, 200000)
        store.grant_approval(request_id, "alice")
        with ctrlrun.context("bot"), ctrlrun.with_approval(request_id):
            with pytest.raises(ApprovalMismatch) as caught:
                refund("pay_1", 500000)
        assert caught.value.reason is MismatchReason.MISMATCH and remote.calls == []
        assert store.get_approval(request_id).status is ApprovalStatus.GRANTED
        [invalidated] = [e for e in store.events() if e.type is EventType.APPROVAL_INVALIDATED]
        assert invalidated.approval_id == request_id
        assert receipts(store)[-1]["result"] == "blocked"

    def test_a_replayed_approval_is_refused_as_consumed(self, refund, remote, store):
        request_id = self.ask(refund)
        store.grant_approval(request_id, "alice")
        with ctrlrun.context("bot"), ctrlrun.with_approval(request_id):
            refund("pay_1", 200000)
            with pytest.raises(ApprovalMismatch) as caught:
                refund("pay_1", 200000)
        assert caught.value.reason is MismatchReason.CONSUMED and len(remote.calls) == 1

    def test_an_expired_approval_is_refused(self, refund, remote, store, clock):
        request_id = self.ask(refund)
        store.grant_approval(request_id, "alice")
        clock.advance(timedelta(minutes=16))
        with ctrlrun.context("bot"), ctrlrun.with_approval(request_id):
            with pytest.raises(ApprovalMismatch) as caught:
                refund("pay_1", 200000)
        assert caught.value.reason is MismatchReason.EXPIRED and remote.calls == []
        assert store.get_approval(request_id).status is ApprovalStatus.EXPIRED

    def test_a_denied_approval_denies_the_action(self, refund, remote, store):
        request_id = self.ask(refund)
        store.deny_approval(request_id, "alice")
        with ctrlrun.context("bot"), ctrlrun.with_approval(request_id):
            with pytest.raises(ActionDenied) as caught:
                refund("pay_1", 200000)
        assert caught.value.reason is DenyReason.APPROVAL_DENIED
        assert receipts(store)[-1]["result"] == "denied"


class TestDenials:
    def test_policy_deny_writes_a_denied_receipt(self, refund, remote, store):
        with ctrlrun.context("bot"), pytest.raises(ActionDenied) as caught:
            refund("pay_1", 50_000_000)
        assert caught.value.reason is DenyReason.POLICY and caught.value.rule == 2
        assert remote.calls == [] and receipts(store)[0]["result"] == "denied"
        assert event_types(store)[-1] is EventType.ACTION_DENIED

    def test_an_unknown_action_is_denied(self, control, store):
        @ctrlrun.protect("nobody.listed.this", control=control)
        def act():
            raise AssertionError("must not run")

        with ctrlrun.context("bot"), pytest.raises(ActionDenied) as caught:
            act()
        assert caught.value.reason is DenyReason.UNKNOWN_ACTION
        assert receipts(store)[0]["decision_reason"] == "unknown_action"

    def test_no_principal_is_denied_with_no_evidence(self, refund, remote, store, caplog):
        with pytest.raises(ActionDenied) as caught:
            refund("pay_1", 1)
        assert caught.value.reason is DenyReason.NO_PRINCIPAL
        assert store.receipts() == () and store.events() == () and remote.calls == []
        assert "outside ctrlrun.context" in caplog.text

    def test_an_unresolvable_effect_key_is_denied_before_the_policy(self, control, store):
        @ctrlrun.protect("email.send", control=control, effect="email:{message_id}")
        def send(message_id: str | None):
            raise AssertionError("must not run")

        with ctrlrun.context("bot"), pytest.raises(EffectKeyError):
            send(None)
        [receipt] = receipts(store)
        assert (receipt["result"], receipt["decision_reason"]) == ("denied", "effect_key_error")
        assert event_types(store) == [EventType.ACTION_PROPOSED, EventType.ACTION_DENIED]


class TestDecoration:
    def test_the_decorator_template_wins_over_the_policy(self, control, store):
        @ctrlrun.protect("stripe.refund", control=control, effect="mine:{payment_id}")
        def refund(payment_id: str, amount: int):
            return None

        with ctrlrun.context("bot"):
            refund("p", 1)
        assert store.get_effect("mine:p") is not None and store.get_effect("refund:p") is None

    @pytest.mark.parametrize(
        ("kwargs", "fn"),
        [
            ({"effect": "k:{missing}"}, lambda payment_id: None),
            ({"effect": "k:{"}, lambda payment_id: None),
            ({"resource": "r:{resource}"}, lambda payment_id: None),
            ({"lease": timedelta(0)}, lambda payment_id: None),
            ({}, lambda *args: None),
            ({}, lambda **kwargs: None),
        ],
    )
    def test_mistakes_fail_at_decoration(self, control, kwargs, fn):
        with pytest.raises(InvalidArgument):
            ctrlrun.protect("stripe.refund", control=control, **kwargs)(fn)

    def test_a_resource_template_is_part_of_the_action(self, control, store):
        @ctrlrun.protect("k8s.namespace.delete", control=control, resource="namespace:{name}")
        def delete(name: str):
            return None

        with ctrlrun.context("bot"), pytest.raises(ApprovalRequired) as caught:
            delete("prod")
        assert store.get_approval(caught.value.request_id).action["resource"] == "namespace:prod"
