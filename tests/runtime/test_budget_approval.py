"""``over: approve`` budgets on protected calls, both stores, sync and async: a call past the
limit is neither run nor denied but waits for a person, its request carrying the budget's
state as the store read it (nothing reserved or consumed meanwhile); a grant lets the
identical call run, consuming past the limit (receipt: before and after); a denial denies it
with nothing consumed; a call that fits again when retried just consumes."""

from __future__ import annotations

import asyncio

import pytest

import ctrlrun
from ctrlrun import (
    ActionDenied,
    ApprovalRequired,
    ApprovalStatus,
    Control,
    DenyReason,
    EffectState,
)
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.event import EventType
from ctrlrun.runtime.request_facts import request_facts
from ctrlrun.store.budgets import budget_spend

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  pay:
    effect: "pay:{ref}"
    decision: allow
    budget: {sum: amount, limit: 1000, per: agent, window: 3650d, over: approve}
  wire:
    effect: "wire:{ref}"
    decision: approve
    budget: {sum: amount, limit: 100, window: 3650d, over: approve}
"""


@pytest.fixture
def policy():
    return load_policy_text(POLICY)


@pytest.fixture
def control(policy, store, clock):
    return Control(policy, store, clock=clock)


def spent(store) -> dict[str, int]:
    return {budget_id: total for budget_id, _, total in budget_spend(store)}


def pay_on(control, ran, fail=None):
    @ctrlrun.protect("pay", control=control)
    def pay(ref: str, amount: int) -> str:
        ran.append(ref)
        if fail is not None:
            raise fail
        return "paid"

    return pay


def ask(pay, ref="r2", amount=500) -> ApprovalRequired:
    with ctrlrun.context("bot"), pytest.raises(ApprovalRequired) as needed:
        pay(ref, amount)
    return needed.value


def requested_budget(store, approval_id: str) -> dict:
    [event] = [
        e
        for e in store.events()
        if e.type is EventType.APPROVAL_REQUESTED and e.approval_id == approval_id
    ]
    return event.data["budget"]


def test_past_the_limit_waits_for_a_person_with_the_budget_on_the_request(control, store, policy):
    ran: list[str] = []
    pay = pay_on(control, ran)
    with ctrlrun.context("bot"):
        assert pay("r1", 600) == "paid"
    needed = ask(pay)
    assert ran == ["r1"]  # not run
    assert store.get_effect("pay:r2") is None  # nothing reserved
    assert spent(store) == {"pay:agent:bot": 600}  # nothing consumed
    assert [r.document["result"] for r in store.receipts()] == ["committed"]  # not denied
    budget = requested_budget(store, needed.request_id)
    assert budget["budget_id"] == "pay:agent:bot" and budget["per"] == "agent"
    assert (budget["limit"], budget["spent"], budget["amount"], budget["after"]) == (
        1000,
        600,
        500,
        1100,
    )
    assert budget["window"] == "3650d"
    assert budget["window_start"] < budget["window_end"]
    facts = request_facts(store, store.get_approval(needed.request_id), policy, 0)
    line = facts.budget.line()
    assert line is not None and "spent 600 of 1000" in line
    assert "this call 500 makes 1100, 100 over the limit" in line
    assert facts.budget_now is not None and facts.budget_now.spent_before == 600
    assert ask(pay).request_id == needed.request_id  # the identical retry: the same request


def test_a_grant_runs_it_past_the_limit_and_the_receipt_shows_before_and_after(control, store):
    ran: list[str] = []
    pay = pay_on(control, ran)
    with ctrlrun.context("bot"):
        pay("r1", 600)
    needed = ask(pay)
    store.grant_approval(needed.request_id, "alice")
    with ctrlrun.context("bot"):
        assert pay("r2", 500) == "paid"
    assert ran == ["r1", "r2"]
    assert spent(store) == {"pay:agent:bot": 1100}  # past the limit: a person approved it
    last = store.receipts()[-1].document
    assert last["result"] == "committed" and last["approval_id"] == needed.request_id
    assert last["approver"] == "alice"
    budget = last["budget"]
    assert (budget["spent_before"], budget["amount"], budget["spent_after"]) == (600, 500, 1100)
    assert store.get_approval(needed.request_id).status is ApprovalStatus.CONSUMED
    with ctrlrun.context("bot"):  # the grant was for that call only
        assert ask(pay, "r3", 1).request_id != needed.request_id


def test_a_denial_denies_it_with_nothing_consumed(control, store):
    ran: list[str] = []
    pay = pay_on(control, ran)
    with ctrlrun.context("bot"):
        pay("r1", 600)
    needed = ask(pay)
    store.deny_approval(needed.request_id, "alice", "too much this month")
    with ctrlrun.context("bot"), pytest.raises(ActionDenied) as denied:
        pay("r2", 500)
    assert denied.value.reason is DenyReason.APPROVAL_DENIED
    assert ran == ["r1"]
    assert store.get_effect("pay:r2") is None
    assert spent(store) == {"pay:agent:bot": 600}
    assert store.receipts()[-1].document["result"] == "denied"


def test_a_call_that_fits_again_when_retried_just_consumes(control, store):
    """Room made meanwhile (an AMBIGUOUS charge resolved as failed): no person needed."""
    ran: list[str] = []
    with ctrlrun.context("bot"), pytest.raises(RuntimeError):
        pay_on(control, ran, RuntimeError("timeout"))("r1", 600)
    pay = pay_on(control, ran)
    needed = ask(pay)
    store.resolve_effect("pay:r1", EffectState.FAILED, "ops")
    with ctrlrun.context("bot"):
        assert pay("r2", 500) == "paid"
    assert spent(store) == {"pay:agent:bot": 500}
    last = store.receipts()[-1].document
    assert last["approval_id"] is None
    assert (last["budget"]["spent_before"], last["budget"]["spent_after"]) == (0, 500)
    assert store.get_approval(needed.request_id).status is ApprovalStatus.PENDING


def test_a_rule_that_asks_shows_the_budget_and_its_grant_passes_the_limit(control, store):
    """A call the policy already sends to a person is asked once: its request shows the
    budget, and the grant also lets it past an ``over: approve`` limit."""
    ran: list[int] = []

    @ctrlrun.protect("wire", control=control)
    def wire(ref: str, amount: int) -> str:
        ran.append(amount)
        return "sent"

    with ctrlrun.context("bot"), pytest.raises(ApprovalRequired) as needed:
        wire("w1", 150)
    budget = requested_budget(store, needed.value.request_id)
    assert (budget["spent"], budget["limit"], budget["amount"]) == (0, 100, 150)
    store.grant_approval(needed.value.request_id, "alice")
    with ctrlrun.context("bot"):
        assert wire("w1", 150) == "sent"
    assert spent(store) == {"wire:shared": 150}
    assert ran == [150]


def test_async_calls_wait_then_run_on_a_grant(control, store):
    ran: list[str] = []

    @ctrlrun.protect("pay", control=control)
    async def pay(ref: str, amount: int) -> str:
        ran.append(ref)
        return "paid"

    async def main() -> str:
        with ctrlrun.context("bot"):
            assert await pay("r1", 900) == "paid"
            with pytest.raises(ApprovalRequired) as needed:
                await pay("r2", 200)
            assert spent(store) == {"pay:agent:bot": 900}
            assert store.get_effect("pay:r2") is None
            store.grant_approval(needed.value.request_id, "alice")
            assert await pay("r2", 200) == "paid"
            return needed.value.request_id

    request_id = asyncio.run(main())
    assert ran == ["r1", "r2"]
    assert spent(store) == {"pay:agent:bot": 1100}
    assert store.receipts()[-1].document["approval_id"] == request_id


def test_async_denial_consumes_nothing(control, store):
    ran: list[str] = []

    @ctrlrun.protect("pay", control=control)
    async def pay(ref: str, amount: int) -> str:
        ran.append(ref)
        return "paid"

    async def main() -> None:
        with ctrlrun.context("bot"):
            await pay("r1", 1000)
            with pytest.raises(ApprovalRequired) as needed:
                await pay("r2", 1)
            store.deny_approval(needed.value.request_id, "alice", "no")
            with pytest.raises(ActionDenied) as denied:
                await pay("r2", 1)
            assert denied.value.reason is DenyReason.APPROVAL_DENIED

    asyncio.run(main())
    assert ran == ["r1"]
    assert spent(store) == {"pay:agent:bot": 1000}
