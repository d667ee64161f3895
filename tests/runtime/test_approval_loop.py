"""The approval loop without orphans, on both stores: identical retries share one request; a
grant lets the identical call run once without presenting it; a denial denies the identical
call; another argument is another request; the policy sets each action's approval lifetime.
``control.approvals`` and ``control.evaluate`` answer without writing."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import (
    ActionDenied,
    AlreadyCommitted,
    ApprovalRequired,
    ApprovalStatus,
    Control,
    Decision,
    DenyReason,
    EffectState,
)
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.event import EventType
from support.policies import POLICY

BOT = ctrlrun.Principal("support-bot", "alice")
BIG = 200_000


@pytest.fixture
def ran():
    return []


@pytest.fixture
def refund(control, ran):
    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        ran.append((payment_id, amount))
        return "refunded"

    return refund


def ask(refund, payment_id="pay_big", amount=BIG):
    with ctrlrun.context(BOT.agent, BOT.user), pytest.raises(ApprovalRequired) as needed:
        refund(payment_id, amount)
    return needed.value


def test_three_retries_before_a_grant_make_one_request(refund, store, clock):
    first, second, third = (ask(refund) for _ in range(3))
    assert first.request_id == second.request_id == third.request_id
    assert [a.approval_id for a in store.list_approvals()] == [first.request_id]
    assert first.action_hash.startswith("sha256:")
    assert first.expires_at == store.get_approval(first.request_id).expires_at
    assert first.summary == (
        'stripe.refund {"amount":200000,"payment_id":"pay_big"} by support-bot/alice'
    )
    reused = [e for e in store.events() if e.type is EventType.APPROVAL_REUSED]
    assert [e.action_id for e in reused] == [second.action_id, third.action_id]


def test_a_grant_lets_the_identical_call_run_once_without_presenting_it(refund, store, ran):
    request = ask(refund)
    store.grant_approval(request.request_id, "bob")
    with ctrlrun.context(BOT.agent, BOT.user):
        assert refund("pay_big", BIG) == "refunded"
        with pytest.raises(AlreadyCommitted) as again:
            refund("pay_big", BIG)  # single use, and the key committed: nobody is asked again
    assert again.value.result == "refunded"
    assert [a.approval_id for a in store.list_approvals()] == [request.request_id]
    assert ran == [("pay_big", BIG)]
    assert store.get_approval(request.request_id).status is ApprovalStatus.CONSUMED
    [receipt] = [r for r in store.receipts() if r["result"] == "committed"]
    assert receipt["approver"] == "bob" and receipt["approval_id"] == request.request_id


def test_an_async_identical_call_uses_the_grant_too(control, store, ran):
    @ctrlrun.protect("stripe.refund", control=control)
    async def refund(payment_id: str, amount: int):
        ran.append(payment_id)
        return "refunded"

    async def call():
        with ctrlrun.context(BOT.agent, BOT.user):
            return await refund("pay_big", BIG)

    with pytest.raises(ApprovalRequired) as needed:
        asyncio.run(call())
    with pytest.raises(ApprovalRequired) as again:
        asyncio.run(call())
    assert again.value.request_id == needed.value.request_id
    store.grant_approval(needed.value.request_id, "bob")
    assert asyncio.run(call()) == "refunded" and ran == ["pay_big"]


def test_another_argument_or_principal_is_another_request(refund, store):
    first = ask(refund)
    other_amount = ask(refund, amount=BIG + 1)
    assert other_amount.request_id != first.request_id
    with ctrlrun.context("other-bot"), pytest.raises(ApprovalRequired) as other:
        refund("pay_big", BIG)
    assert other.value.request_id not in (first.request_id, other_amount.request_id)
    assert len(store.list_approvals()) == 3


def test_a_denial_denies_the_identical_call_until_it_expires(refund, store, clock, ran):
    request = ask(refund)
    store.deny_approval(request.request_id, "bob", "not this customer")
    with ctrlrun.context(BOT.agent, BOT.user), pytest.raises(ActionDenied) as denied:
        refund("pay_big", BIG)
    assert denied.value.reason is DenyReason.APPROVAL_DENIED
    assert len(store.list_approvals()) == 1 and ran == []
    clock.advance(timedelta(minutes=16))
    assert ask(refund).request_id != request.request_id  # asked again once it lapsed


def test_an_expired_request_is_not_reused(refund, store, clock):
    request = ask(refund)
    clock.advance(timedelta(minutes=16))
    assert ask(refund).request_id != request.request_id


def test_the_policy_sets_each_action_s_approval_lifetime(store, clock):
    text = POLICY.replace(
        "  k8s.namespace.delete:\n    decision: approve\n",
        "  k8s.namespace.delete:\n    decision: approve\n    approval: {ttl: 2h}\n",
    )
    control = Control(load_policy_text(text), store, clock=clock)

    @ctrlrun.protect("k8s.namespace.delete", control=control)
    def delete(name: str):
        return name

    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalRequired) as needed:
        delete("prod")
    record = store.get_approval(needed.value.request_id)
    assert record.expires_at - record.created_at == timedelta(hours=2)


def test_approvals_api_lists_grants_denies_and_finds_by_action(control, refund, store):
    first = ask(refund)
    second = ask(refund, "pay_other")
    assert {a.approval_id for a in control.approvals.pending()} == {
        first.request_id,
        second.request_id,
    }
    arguments = {"payment_id": "pay_big", "amount": BIG}
    found = control.approvals.for_action("stripe.refund", arguments, BOT)
    assert found.approval_id == first.request_id and found.status is ApprovalStatus.PENDING
    assert control.approvals.grant(first.request_id, "bob").status is ApprovalStatus.GRANTED
    denied = control.approvals.deny(second.request_id, "bob", "no")
    assert denied.status is ApprovalStatus.DENIED
    assert control.approvals.pending() == ()
    assert control.approvals.get(first.request_id).approver == "bob"
    assert control.approvals.for_action("stripe.refund", arguments, BOT).status is (
        ApprovalStatus.GRANTED
    )
    assert control.approvals.for_action("stripe.refund", {**arguments, "amount": 1}, BOT) is None


def test_evaluate_answers_without_writing(control, refund, store):
    before = store.write_transactions
    small = control.evaluate("stripe.refund", {"payment_id": "pay_1", "amount": 5}, BOT)
    assert (small.decision, small.reason, small.effect_key) == (
        Decision.ALLOW,
        "rule[0]",
        "refund:pay_1",
    )
    assert small.effect_state is None and small.approval is None and not small.approved
    big = control.evaluate("stripe.refund", {"payment_id": "pay_big", "amount": BIG}, BOT)
    assert big.decision is Decision.APPROVE and big.approval is None
    assert store.write_transactions == before
    request = ask(refund)
    store.grant_approval(request.request_id, "bob")
    big = control.evaluate("stripe.refund", {"payment_id": "pay_big", "amount": BIG}, BOT)
    assert big.approved and big.approval.approval_id == request.request_id
    with ctrlrun.context(BOT.agent, BOT.user):
        refund("pay_1", 5)
    done = control.evaluate("stripe.refund", {"payment_id": "pay_1", "amount": 5}, BOT)
    assert done.effect_state is EffectState.COMMITTED
    bad = control.evaluate("stripe.refund", {"payment_id": "", "amount": 5}, BOT)
    assert (bad.decision, bad.reason) == (Decision.DENY, "effect_key_error")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_eight_processes_asking_at_once_make_one_request(backend, request, tmp_path):
    from support.race import ask_at_once, preloaded_processes, run_racers

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'state.db'}"
        ctrlrun.SQLiteStateStore(tmp_path / "state.db").close()  # migrate once
        opened = lambda: ctrlrun.SQLiteStateStore(tmp_path / "state.db")  # noqa: E731
    else:
        from ctrlrun.postgres import PostgresStateStore

        pg_schema = request.getfixturevalue("pg_schema")
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
        separator = "&" if "?" in pg_schema.url else "?"
        url = f"{pg_schema.url}{separator}ctrlrun_schema={pg_schema.schema}"
        opened = lambda: PostgresStateStore(pg_schema.url, schema=pg_schema.schema)  # noqa: E731
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    ctx = preloaded_processes()
    racers = run_racers(ctx, ask_at_once, (url, str(policy)), 8, ctx.Barrier(8))
    answers = {answer for _, answer in racers}
    assert len(answers) == 1 and next(iter(answers)).startswith("apr_"), answers
    store = opened()
    try:
        assert [a.approval_id for a in store.list_approvals()] == list(answers)
    finally:
        store.close()


def test_sinks_see_each_approval_step(store, clock):
    seen = []

    class Watch:
        def receipt(self, receipt):
            seen.append(("receipt", receipt.document["result"]))

        def approval(self, kind, record):
            seen.append((kind, record.approval_id))

    control = Control(load_policy_text(POLICY), store, clock=clock, sinks=[Watch()])

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        return "refunded"

    first = ask(refund)
    ask(refund)  # the same request: not requested again
    control.approvals.grant(first.request_id, "bob")
    second = ask(refund, "pay_2")
    control.approvals.deny(second.request_id, "bob", "no")
    third = ask(refund, "pay_3")
    control.approvals.grant(third.request_id, "bob")
    clock.advance(timedelta(minutes=16))
    with ctrlrun.context(BOT.agent, BOT.user), ctrlrun.with_approval(third.request_id):
        with pytest.raises(ctrlrun.ApprovalMismatch):
            refund("pay_3", BIG)
    steps = [s for s in seen if s[0] != "receipt"]
    assert steps == [
        ("requested", first.request_id),
        ("granted", first.request_id),
        ("requested", second.request_id),
        ("denied", second.request_id),
        ("requested", third.request_id),
        ("granted", third.request_id),
        ("expired", third.request_id),
    ]
