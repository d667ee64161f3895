"""Budgets on protected calls, both stores: the charge goes with the reservation; past the
limit a call is denied (over_budget) with nothing run; a FAILED attempt gives its amount back,
an AMBIGUOUS one keeps it until ``resolve --failed``; calls without an effect key count;
a bad amount is refused before anything is written; async the same."""

from __future__ import annotations

import asyncio

import pytest

import ctrlrun
from ctrlrun import ActionDenied, Control, DenyReason, NotExecuted
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.effect import EffectState
from ctrlrun.store.budgets import budget_spend

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  pay:
    effect: "pay:{ref}"
    decision: allow
    budget: {sum: amount, limit: 1000, per: agent, window: 3650d}
  note:
    decision: allow
    budget: {sum: amount, limit: 100, window: 3650d}
  watch:
    decision: allow
    mode: observe
    budget: {sum: amount, limit: 100, window: 3650d}
"""


@pytest.fixture
def control(store, clock):
    return Control(load_policy_text(POLICY), store, clock=clock)


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


def test_committed_keeps_and_past_the_limit_is_denied(control, store):
    ran: list[str] = []
    with ctrlrun.context("bot"):
        pay = pay_on(control, ran)
        assert pay("r1", 600) == "paid"
        assert pay("r2", 400) == "paid"  # exactly at the limit
        with pytest.raises(ActionDenied) as refused:
            pay("r3", 1)
    assert refused.value.reason is DenyReason.OVER_BUDGET
    assert "spent 1000 of 1000" in refused.value.message
    assert ran == ["r1", "r2"]  # nothing executed
    assert store.get_effect("pay:r3") is None  # nothing reserved
    assert spent(store) == {"pay:agent:bot": 1000}
    results = [r.document["result"] for r in store.receipts()]
    assert results == ["committed", "committed", "denied"]


def test_per_agent_budgets_are_separate(control, store):
    ran: list[str] = []
    with ctrlrun.context("bot"):
        pay_on(control, ran)("r1", 1000)
    with ctrlrun.context("other"):
        pay_on(control, ran)("r2", 1000)
    assert spent(store) == {"pay:agent:bot": 1000, "pay:agent:other": 1000}


def test_failed_gives_back(control, store):
    ran: list[str] = []
    with ctrlrun.context("bot"):
        with pytest.raises(NotExecuted):
            pay_on(control, ran, NotExecuted("connection refused"))("r1", 900)
        assert store.get_effect("pay:r1").state is EffectState.FAILED
        assert spent(store) == {"pay:agent:bot": 0}
        assert pay_on(control, ran)("r2", 1000) == "paid"


def test_ambiguous_keeps_until_resolved_failed(control, store):
    ran: list[str] = []
    with ctrlrun.context("bot"):
        with pytest.raises(RuntimeError):
            pay_on(control, ran, RuntimeError("timeout"))("r1", 900)
        assert store.get_effect("pay:r1").state is EffectState.AMBIGUOUS
        assert spent(store) == {"pay:agent:bot": 900}
        with pytest.raises(ActionDenied):
            pay_on(control, ran)("r2", 200)
        store.resolve_effect("pay:r1", EffectState.FAILED, "ops")
        assert spent(store) == {"pay:agent:bot": 0}
        assert pay_on(control, ran)("r2", 200) == "paid"


def test_calls_without_an_effect_key_count(control, store):
    ran: list[int] = []

    @ctrlrun.protect("note", control=control)
    def note(amount: int) -> str:
        ran.append(amount)
        return "ok"

    with ctrlrun.context("bot"):
        assert note(60) == "ok"
        with pytest.raises(ActionDenied) as refused:
            note(41)
        assert note(40) == "ok"
    assert refused.value.reason is DenyReason.OVER_BUDGET
    assert ran == [60, 40]
    assert spent(store) == {"note:shared": 100}


@pytest.mark.parametrize("amount", ["12", True, -1])  # floats: refused earlier, canonical.py
def test_bad_amount_is_refused_before_any_write(control, store, amount):
    ran: list[str] = []
    with ctrlrun.context("bot"), pytest.raises(ActionDenied) as refused:
        pay_on(control, ran)("r1", amount)
    assert refused.value.reason is DenyReason.BUDGET_UNEVALUABLE
    assert ran == [] and store.get_effect("pay:r1") is None
    assert spent(store) == {}


def test_async_calls_consume_the_same_budget(control, store):
    ran: list[str] = []

    @ctrlrun.protect("pay", control=control)
    async def pay(ref: str, amount: int) -> str:
        ran.append(ref)
        return "paid"

    async def main() -> None:
        with ctrlrun.context("bot"):
            assert await pay("r1", 700) == "paid"
            with pytest.raises(ActionDenied) as refused:
                await pay("r2", 301)
            assert refused.value.reason is DenyReason.OVER_BUDGET

    asyncio.run(main())
    assert ran == ["r1"]
    assert spent(store) == {"pay:agent:bot": 700}


def test_receipt_shows_the_budget_before_and_after(control, store, backend, tmp_path):
    """The receipt carries the store's before/after, limit and window; so does ``inspect``."""
    ran: list[str] = []
    with ctrlrun.context("bot"):
        pay_on(control, ran)("r1", 600)
        pay_on(control, ran)("r2", 300)
    last = store.receipts()[-1]
    budget = last.document["budget"]
    assert (budget["spent_before"], budget["amount"], budget["spent_after"]) == (600, 300, 900)
    assert (budget["limit"], budget["window"], budget["budget_id"]) == (
        1000,
        "3650d",
        "pay:agent:bot",
    )
    if backend == "sqlite":
        from support.cli import run

        shown = run("inspect", last.document["action_id"], "--store-url", store_url(store)).stdout
        assert "pay:agent:bot: spent 600 -> 900 of 1000 (3650d window" in shown


def store_url(store) -> str:
    return f"sqlite:///{store.path}"


def test_observed_calls_read_the_budget_without_consuming(control, store):
    """An observed call runs; its receipt says would_have over_budget past the limit, and
    nothing is consumed either way."""
    ran: list[int] = []

    @ctrlrun.protect("watch", control=control)
    def watch(amount: int) -> str:
        ran.append(amount)
        return "ok"

    with ctrlrun.context("bot"):
        assert watch(100) == "ok"
        assert watch(101) == "ok"
        assert watch("12") == "ok"  # enforcement would refuse this amount
    assert ran == [100, 101, "12"]
    assert spent(store) == {}
    observed = [r.document["observed"] for r in store.receipts()]
    assert [o["would_have"] for o in observed] == [None, "over_budget", "denied"]
    assert "spent 0 of 100" in observed[1]["why"]


def test_a_budgeted_call_still_costs_two_write_transactions(control, store):
    """The charge rides in the reservation's transaction; the outcome's is the second."""
    ran: list[str] = []
    with ctrlrun.context("bot"):
        pay = pay_on(control, ran)
        pay("r0", 1)  # the store's first-use writes (templates) happen here
        before = store.write_transactions
        pay("r1", 1)
    assert store.write_transactions - before == 2
