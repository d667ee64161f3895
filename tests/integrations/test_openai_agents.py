"""The OpenAI Agents SDK with its ScriptedModel, offline, on both stores: an allowed call runs
once; an approval pauses the run with ctrlrun's request made; a grant through ctrlrun, the
SDK's approve and a resume run it once; the SDK's approval alone (no grant) is a denial, never
a run; refusals are results the model reads; sync and async tools."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import ctrlrun
from ctrlrun.integrations.openai_agents import guarded_tool

set_tracing_disabled(True)

BOT = ctrlrun.Principal("support-bot", "alice")


@pytest.fixture
def tool(protected_refund, control):
    return guarded_tool(protected_refund, control=control, principal=lambda ctx: BOT)


def agent(tool, *calls):
    steps = [
        ModelStep(output=[function_call("refund", args, call_id=f"call_{i}")])
        for i, args in enumerate(calls)
    ]
    model = ScriptedModel([*steps, ModelStep(output=[assistant_message("done")])])
    return Agent(name="support", model=model, tools=[tool])


def tool_outputs(result):
    return [item.output for item in result.new_items if item.type == "tool_call_output_item"]


def test_an_allowed_call_runs_once(tool, ran, store):
    result = asyncio.run(Runner.run(agent(tool, {"payment_id": "pay_1", "amount": 5}), "go"))
    assert tool_outputs(result) == ["refunded 5"] and ran == [("pay_1", 5)]
    assert store.receipts()[-1]["principal"] == {"agent": "support-bot", "user": "alice"}


def test_an_approval_pauses_with_the_request_and_a_grant_runs_it_once(tool, ran, control, store):
    runner_agent = agent(tool, {"payment_id": "pay_big", "amount": 200_000})
    paused = asyncio.run(Runner.run(runner_agent, "go"))
    [item] = paused.interruptions
    assert ran == []
    found = control.approvals.for_action(
        "stripe.refund", {"payment_id": "pay_big", "amount": 200_000}, BOT
    )
    assert found is not None and found.status.value == "pending"
    control.approvals.grant(found.approval_id, "bob")
    state = paused.to_state()
    state.approve(item)
    resumed = asyncio.run(Runner.run(runner_agent, state))
    assert tool_outputs(resumed) == ["refunded 200000"] and ran == [("pay_big", 200_000)]
    assert len(store.list_approvals()) == 1
    [receipt] = [r for r in store.receipts() if r["result"] == "committed"]
    assert receipt["approver"] == "bob"


def test_the_sdk_s_approval_alone_is_a_denial(tool, ran):
    runner_agent = agent(tool, {"payment_id": "pay_big", "amount": 200_000})
    paused = asyncio.run(Runner.run(runner_agent, "go"))
    state = paused.to_state()
    [item] = paused.interruptions
    state.approve(item, always_approve=True)
    resumed = asyncio.run(Runner.run(runner_agent, state))
    [text] = tool_outputs(resumed)
    assert text.startswith("Denied: this exact call was not approved in ctrlrun") and ran == []


def test_a_refusal_is_a_result_the_model_reads(tool, ran):
    result = asyncio.run(Runner.run(agent(tool, {"payment_id": "x", "amount": 90_000_000}), "go"))
    [text] = tool_outputs(result)
    assert text.startswith("Not allowed") and ran == []


def test_a_repeated_call_gets_the_duplicate_text(tool, ran):
    call = {"payment_id": "pay_1", "amount": 5}
    result = asyncio.run(Runner.run(agent(tool, call, call), "go"))
    first, second = tool_outputs(result)
    assert first == "refunded 5" and ran == [("pay_1", 5)]
    assert second.startswith("Already done") and 'its result was "refunded 5"' in second


def test_a_lost_reply_is_ambiguous_and_the_model_s_retry_is_refused(control, ran, store):
    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        ran.append(payment_id)
        raise TimeoutError("the provider's reply was lost")

    tool = guarded_tool(refund, control=control, principal=lambda ctx: BOT)
    call = {"payment_id": "pay_1", "amount": 5}
    result = asyncio.run(Runner.run(agent(tool, call, call), "go"))
    first, second = tool_outputs(result)
    assert "unknown" in first.lower() and ran == ["pay_1"]
    assert store.get_effect("refund:pay_1").state is ctrlrun.EffectState.AMBIGUOUS
    assert second != first and ("ambiguous" in second.lower() or "unknown" in second.lower())


@pytest.mark.parametrize("amount", [200_000, 300_000], ids=["identical", "same-key"])
def test_a_committed_key_is_answered_without_pausing(tool, ran, store, committed_big, amount):
    request_id = committed_big()
    result = asyncio.run(Runner.run(agent(tool, {"payment_id": "pay_big", "amount": amount}), "go"))
    assert result.interruptions == []  # nobody is asked
    [text] = tool_outputs(result)
    assert text.startswith("Already done") and 'its result was "refunded 200000"' in text
    assert [a.approval_id for a in store.list_approvals()] == [request_id] and ran == []


def test_a_denial_tells_the_model_the_approver_s_reason(tool, ran, control):
    runner_agent = agent(tool, {"payment_id": "pay_big", "amount": 200_000})
    paused = asyncio.run(Runner.run(runner_agent, "go"))
    [item] = paused.interruptions
    found = control.approvals.for_action(
        "stripe.refund", {"payment_id": "pay_big", "amount": 200_000}, BOT
    )
    control.approvals.deny(found.approval_id, "carol", "the bank already refunded it")
    state = paused.to_state()
    state.approve(item)
    resumed = asyncio.run(Runner.run(runner_agent, state))
    [text] = tool_outputs(resumed)
    assert "the bank already refunded it" in text and ran == []


def test_a_standing_denial_is_not_asked_about_again(tool, ran, control, store):
    call = {"payment_id": "pay_big", "amount": 200_000}
    paused = asyncio.run(Runner.run(agent(tool, call), "go"))
    assert paused.interruptions
    [request] = store.list_approvals()
    control.approvals.deny(request.approval_id, "carol", "no")
    again = asyncio.run(Runner.run(agent(tool, call), "go again"))
    assert again.interruptions == [] and len(store.list_approvals()) == 1
    [text] = tool_outputs(again)
    assert text.startswith("Not allowed: a person denied this exact call") and ran == []


def test_the_brake_ends_a_run_that_repeats_a_refused_call(protected_refund, control, ran, store):
    tool = guarded_tool(
        protected_refund, control=control, principal=lambda ctx: BOT, max_refusals=3
    )
    denied = {"payment_id": "x", "amount": 90_000_000}
    with pytest.raises(ctrlrun.RefusalLoop) as stopped:
        asyncio.run(Runner.run(agent(tool, *[denied] * 5), "refund a fortune"))
    assert stopped.value.refusals == 3 and stopped.value.tool == "refund"
    assert stopped.value.last.startswith("Not allowed")
    assert [r["result"] for r in store.receipts()] == ["denied"] * 3 and ran == []
    other = asyncio.run(Runner.run(agent(tool, denied, denied), "a new run"))
    assert [t[:11] for t in tool_outputs(other)] == ["Not allowed", "Not allowed"]
