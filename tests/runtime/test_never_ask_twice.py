"""Nobody is asked about what already ran (issue 27), on both stores, sync and async: an
approval-gated call whose effect key is COMMITTED is answered ``AlreadyCommitted`` with the
stored result, and one whose key is in progress or AMBIGUOUS is refused, before any request:
no new request, no notification (outbox row), no sink "requested" step, no inbox entry. The
call that needs a person the first time still costs what it did, and a granted call still runs
in two write transactions."""

from __future__ import annotations

import asyncio
import threading

import pytest

import ctrlrun
from ctrlrun import (
    AlreadyCommitted,
    AmbiguousEffect,
    ApprovalRequired,
    Control,
    EffectState,
    InProgress,
)
from ctrlrun.config import load_policy_text
from ctrlrun.durable.outbox import Outbox
from support.policies import POLICY

BOT = ctrlrun.Principal("support-bot", "alice")
BIG = 200_000
NOTIFY = 'notify:\n  - {name: ops, url: "http://127.0.0.1:9/hook", secret_env: CTRLRUN_NO_SECRET}\n'


class Steps:
    """A sink that keeps every approval step it is handed."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, str]] = []

    def receipt(self, receipt) -> None:
        pass

    def approval(self, kind, record) -> None:
        self.steps.append((kind, record.approval_id))


@pytest.fixture
def steps():
    return Steps()


@pytest.fixture
def control(store, clock, steps):
    policy = load_policy_text(POLICY.replace("actions:\n", NOTIFY + "actions:\n", 1))
    return Control(policy, store, clock=clock, sinks=[steps])


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


@pytest.fixture
def gate():
    """Set by a test to hold the executor until released."""
    return {}


@pytest.fixture
def refund(control, mode, gate):
    def body(payment_id, amount):
        if payment_id in gate:
            entered, release = gate[payment_id]
            entered.set()
            assert release.wait(10)
        if payment_id.startswith("lost"):
            raise TimeoutError("the provider's reply was lost")
        return {"refunded": amount, "payment_id": payment_id}

    if mode == "sync":

        @ctrlrun.protect("stripe.refund", control=control)
        def refund(payment_id: str, amount: int):
            return body(payment_id, amount)

        return refund

    @ctrlrun.protect("stripe.refund", control=control)
    async def arefund(payment_id: str, amount: int):
        return await asyncio.to_thread(body, payment_id, amount)

    return arefund


def call(refund, mode, payment_id, amount):
    with ctrlrun.context(BOT.agent, BOT.user):
        if mode == "sync":
            return refund(payment_id, amount)
        return asyncio.run(refund(payment_id, amount))


def approved_and_ran(refund, mode, control, payment_id="pay_big"):
    with pytest.raises(ApprovalRequired) as needed:
        call(refund, mode, payment_id, BIG)
    control.approvals.grant(needed.value.request_id, "bob")
    assert call(refund, mode, payment_id, BIG) == {"refunded": BIG, "payment_id": payment_id}
    return needed.value.request_id


def asked(store, steps):
    """Every trace of a person being asked: requests, notifications, sink steps."""
    requests = [a.approval_id for a in store.list_approvals()]
    return requests, len(Outbox(store).list()), [s for s in steps.steps if s[0] == "requested"]


@pytest.mark.parametrize("amount", [BIG, BIG + 1], ids=["identical", "same-key"])
def test_a_committed_key_is_answered_without_asking(refund, mode, control, store, steps, amount):
    request_id = approved_and_ran(refund, mode, control)
    before = asked(store, steps)
    assert before == ([request_id], 1, [("requested", request_id)])
    with pytest.raises(AlreadyCommitted) as done:
        call(refund, mode, "pay_big", amount)
    assert done.value.result == {"refunded": BIG, "payment_id": "pay_big"}
    committed = [r for r in store.receipts() if r["result"] == "committed"]
    assert done.value.receipt_id == committed[0].receipt_id
    assert asked(store, steps) == before  # no request, notification nor inbox entry
    assert store.receipts()[-1]["result"] == "blocked"  # the refusal has its receipt


def test_a_denial_does_not_refuse_what_already_ran(refund, mode, control, store):
    """A request made before the key committed and denied after: the model is told the
    effect was done, not "refused" for a refund that was paid."""
    with pytest.raises(ApprovalRequired) as other:
        call(refund, mode, "pay_big", BIG + 1)
    approved_and_ran(refund, mode, control)
    control.approvals.deny(other.value.request_id, "carol")
    with pytest.raises(AlreadyCommitted):
        call(refund, mode, "pay_big", BIG + 1)
    assert len(store.list_approvals()) == 2


def test_an_ambiguous_key_is_refused_without_asking(refund, mode, store, steps):
    with pytest.raises(TimeoutError):
        call(refund, mode, "lost_1", 5)  # allowed, and its reply lost: AMBIGUOUS
    assert store.get_effect("refund:lost_1").state is EffectState.AMBIGUOUS
    with pytest.raises(AmbiguousEffect):
        call(refund, mode, "lost_1", BIG)
    assert asked(store, steps) == ([], 0, [])


def test_a_key_in_progress_is_refused_without_asking(refund, mode, store, steps, gate):
    entered, release = threading.Event(), threading.Event()
    gate["pay_slow"] = (entered, release)
    outcome = []
    context = ctrlrun.context(BOT.agent, BOT.user)
    worker = threading.Thread(target=lambda: outcome.append(call(refund, mode, "pay_slow", 5)))
    worker.start()
    try:
        assert entered.wait(10)  # the allowed call holds refund:pay_slow, mid-flight
        with context, pytest.raises(InProgress):
            call(refund, mode, "pay_slow", BIG)
        assert asked(store, steps) == ([], 0, [])
    finally:
        release.set()
        worker.join(10)
    assert outcome == [{"refunded": 5, "payment_id": "pay_slow"}]


def test_a_failed_key_is_still_asked_about(refund, mode, store, control):
    """FAILED means it did not happen: a person is asked, as before."""
    key = "refund:pay_f"
    with ctrlrun.context(BOT.agent), pytest.raises(ctrlrun.NotExecuted):
        control.execute(
            control.build("stripe.refund", {"payment_id": "pay_f", "amount": 5}, BOT),
            lambda **_: (_ for _ in ()).throw(ctrlrun.NotExecuted("connection refused")),
        )
    assert store.get_effect(key).state is EffectState.FAILED
    with pytest.raises(ApprovalRequired):
        call(refund, mode, "pay_f", BIG)
    assert len(store.list_approvals()) == 1


def test_the_first_ask_and_the_granted_run_cost_what_they_did(refund, mode, control, store):
    before = store.write_transactions
    with pytest.raises(ApprovalRequired) as needed:
        call(refund, mode, "pay_new", BIG)
    assert store.write_transactions - before == 1  # the request (with its refusal receipt)
    control.approvals.grant(needed.value.request_id, "bob")
    before = store.write_transactions
    call(refund, mode, "pay_new", BIG)
    assert store.write_transactions - before == 2  # reserve, record: the happy path


def test_evaluate_and_request_approval_say_so_and_write_nothing(refund, mode, control, store):
    approved_and_ran(refund, mode, control)
    arguments = {"payment_id": "pay_big", "amount": BIG + 5}
    answer = control.evaluate("stripe.refund", arguments, BOT)
    assert isinstance(answer.refusal, AlreadyCommitted)
    assert answer.refusal.result == {"refunded": BIG, "payment_id": "pay_big"}
    before = store.write_transactions, len(store.list_approvals())
    with pytest.raises(AlreadyCommitted):
        control.request_approval(answer.action)
    assert (store.write_transactions, len(store.list_approvals())) == before
    fresh = control.evaluate("stripe.refund", {"payment_id": "pay_other", "amount": BIG}, BOT)
    assert fresh.refusal is None


def test_a_denial_tells_the_model_the_approver_s_reason(refund, mode, control, store):
    with pytest.raises(ApprovalRequired) as needed:
        call(refund, mode, "pay_no", BIG)
    control.approvals.deny(needed.value.request_id, "carol", "duplicate of ticket 4411")
    with pytest.raises(ctrlrun.ActionDenied) as denied:
        call(refund, mode, "pay_no", BIG)
    assert denied.value.approver_reason == "duplicate of ticket 4411"
    assert "duplicate of ticket 4411" in denied.value.for_model()
    assert "Do not retry" in denied.value.for_model()
    assert "duplicate of ticket 4411" in store.receipts()[-1]["error"]
    assert store.denial_reason("apr_unknown") is None
