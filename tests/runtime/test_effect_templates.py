"""The store remembers the effect-key template each action's keys are reserved under: a call
rendering that action's key from another template is refused (``effect_template_changed``),
nothing runs and nothing is reserved, until an operator accepts the change. Both stores, sync
and async, with and without an approval."""

from __future__ import annotations

import asyncio

import pytest

import ctrlrun
from ctrlrun import ApprovalStatus, Control, DenyReason, EffectTemplateChanged
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.event import EventType
from ctrlrun.store.templates import accept_effect_template, effect_templates
from support.policies import POLICY

REKEYED = POLICY.replace(
    'effect: "refund:{payment_id}"', 'effect: "refund:{payment_id}:{amount:int}"'
)


@pytest.fixture
def before(store, clock):
    return Control(load_policy_text(POLICY), store, clock=clock)


@pytest.fixture
def after(store, clock):
    return Control(load_policy_text(REKEYED), store, clock=clock)


@pytest.fixture
def ran():
    return []


def refund_on(control, ran):
    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        ran.append((payment_id, amount))
        return "refunded"

    return refund


def test_the_first_reservation_records_the_template(before, store, ran):
    with ctrlrun.context("bot"):
        refund_on(before, ran)("pay_1", 5)
    [remembered] = effect_templates(store)
    assert (remembered.action, remembered.template) == ("stripe.refund", "refund:{payment_id}")
    assert remembered.accepted_by is None


def test_another_template_is_refused_and_nothing_runs(before, after, store, ran):
    with ctrlrun.context("bot"):
        refund_on(before, ran)("pay_1", 5)
        with pytest.raises(EffectTemplateChanged) as refused:
            refund_on(after, ran)("pay_1", 5)  # a second key for the same refund
    exc = refused.value
    assert exc.reason is DenyReason.EFFECT_TEMPLATE_CHANGED
    assert (exc.remembered, exc.presented) == (
        "refund:{payment_id}",
        "refund:{payment_id}:{amount}",
    )
    assert "ctrlrun policy accept stripe.refund" in exc.message
    assert ran == [("pay_1", 5)] and store.get_effect("refund:pay_1:5") is None
    receipt = store.receipts()[-1].document
    assert receipt["result"] == "blocked" and receipt["action_id"] == exc.action_id
    [event] = [
        e for e in store.events(exc.action_id) if e.type is EventType.EFFECT_RESERVATION_REFUSED
    ]
    assert event.data["reason"] == "effect_template_changed"
    assert event.data["presented"] == "refund:{payment_id}:{amount}"


def test_an_async_call_is_refused_the_same_way(before, after, store, ran):
    @ctrlrun.protect("stripe.refund", control=after)
    async def refund(payment_id: str, amount: int):
        ran.append(payment_id)

    async def main():
        with ctrlrun.context("bot"):
            await refund("pay_2", 5)

    with ctrlrun.context("bot"):
        refund_on(before, ran)("pay_1", 5)
    with pytest.raises(EffectTemplateChanged):
        asyncio.run(main())
    assert ran == [("pay_1", 5)]


def test_an_approved_call_is_refused_and_its_approval_stays_granted(before, after, store, ran):
    with ctrlrun.context("bot"):
        refund_on(before, ran)("pay_1", 5)
        with pytest.raises(ctrlrun.ApprovalRequired) as needed:
            refund_on(after, ran)("pay_big", 200_000)
        approval_id = needed.value.request_id
        store.grant_approval(approval_id, "alice")
        with ctrlrun.with_approval(approval_id), pytest.raises(EffectTemplateChanged):
            refund_on(after, ran)("pay_big", 200_000)
    assert store.get_approval(approval_id).status is ApprovalStatus.GRANTED
    assert ran == [("pay_1", 5)]


def test_an_accepted_change_runs_and_is_an_event(before, after, store, ran):
    with ctrlrun.context("bot"):
        refund_on(before, ran)("pay_1", 5)
        previous = accept_effect_template(
            store, "stripe.refund", "refund:{payment_id}:{amount}", by="ops:carol"
        )
        assert previous == "refund:{payment_id}"
        assert refund_on(after, ran)("pay_3", 7) == "refunded"
        with pytest.raises(EffectTemplateChanged):  # and now the old policy is the stranger
            refund_on(before, ran)("pay_4", 5)
    [remembered] = effect_templates(store)
    assert remembered.template == "refund:{payment_id}:{amount}"
    assert remembered.accepted_by == "ops:carol"
    [accepted] = [e for e in store.events() if e.type is EventType.EFFECT_TEMPLATE_ACCEPTED]
    assert accepted.action_id is None
    assert dict(accepted.data) == {
        "action": "stripe.refund",
        "from": "refund:{payment_id}",
        "to": "refund:{payment_id}:{amount}",
        "by": "ops:carol",
    }


def test_accepting_bad_input_writes_nothing(before, store, ran):
    with ctrlrun.context("bot"):
        refund_on(before, ran)("pay_1", 5)
    for action, template, by in [
        ("stripe.refund", "refund:{payment_id}", "ops"),  # already remembered
        ("stripe.refund", "refund:{", "ops"),
        ("", "x", "ops"),
        ("stripe.refund", "refund:{amount}", " ops"),
    ]:
        with pytest.raises(ctrlrun.InvalidArgument):
            accept_effect_template(store, action, template, by=by)
    assert [t.template for t in effect_templates(store)] == ["refund:{payment_id}"]


def test_a_key_given_outright_is_not_checked(before, store):
    action = ctrlrun.Action(
        "stripe.refund", {"payment_id": "p", "amount": 1}, ctrlrun.Principal("bot")
    )
    receipt = before.execute(action, lambda **_: "ok", effect_key="manual:1")
    assert receipt.document["result"] == "committed"
    assert effect_templates(store) == ()


def test_the_happy_path_still_costs_two_write_transactions(before, store, ran):
    refund = refund_on(before, ran)
    with ctrlrun.context("bot"):
        refund("pay_0", 1)  # the first call also records the template, in the same transaction
        begin = store.write_transactions
        refund("pay_1", 1)
    assert store.write_transactions - begin == 2


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_policies_racing_run_one_refund_once(backend, request, tmp_path):
    """Eight processes behind a barrier, half keying the refund one way and half the other:
    without the remembered template each half would have a key of its own and run it."""
    from support.race import preloaded_processes, race_rekeyed

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'state.db'}"
        ctrlrun.SQLiteStateStore(tmp_path / "state.db").close()  # migrate once
    else:
        from ctrlrun.postgres import PostgresStateStore

        pg_schema = request.getfixturevalue("pg_schema")
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
        separator = "&" if "?" in pg_schema.url else "?"
        url = f"{pg_schema.url}{separator}ctrlrun_schema={pg_schema.schema}"
    policies = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    policies[0].write_text(POLICY)
    policies[1].write_text(REKEYED)
    calls = tmp_path / "calls"
    calls.mkdir()
    answers = race_rekeyed(preloaded_processes(), url, policies, calls)
    assert answers.count("refunded") == 1, answers
    assert answers.count("effect_template_changed") == 4, answers
    assert set(answers) <= {
        "refunded",
        "effect_template_changed",
        "duplicate:in_progress",
        "duplicate:committed",
    }
