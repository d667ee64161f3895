"""pydantic-ai with a scripted FunctionModel, offline, on both stores: an allowed call runs
once; an approval pauses the run (DeferredToolRequests), a grant through ctrlrun's API and a
resume run it once with the approver in the receipt; an approver who edits the arguments gets
a denial, not a crash; refusals are final tool results the model reads; sync and async tools."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

import ctrlrun
from ctrlrun.integrations.pydantic_ai import CtrlrunToolset


def scripted(*calls):
    """A model that makes ``calls`` (tool name, args), one per turn, then answers with the
    last tool result it saw."""
    queue = list(calls)

    def respond(messages, info: AgentInfo) -> ModelResponse:
        if queue:
            name, args = queue.pop(0)
            return ModelResponse(parts=[ToolCallPart(name, json.dumps(args))])
        returns = [
            part
            for message in messages
            for part in getattr(message, "parts", [])
            if isinstance(part, ToolReturnPart)
        ]
        return ModelResponse(parts=[TextPart(str(returns[-1].content if returns else "none"))])

    return FunctionModel(respond)


@pytest.fixture
def toolset(protected_refund):
    tools = FunctionToolset([protected_refund])
    return CtrlrunToolset(tools, principal=lambda ctx: ctrlrun.Principal("support-bot", "alice"))


def agent_for(model, toolset):
    return Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])


def test_an_allowed_call_runs_once(toolset, ran, store):
    agent = agent_for(scripted(("refund", {"payment_id": "pay_1", "amount": 5})), toolset)
    result = asyncio.run(agent.run("refund pay_1"))
    assert result.output == "refunded 5" and ran == [("pay_1", 5)]
    [receipt] = store.receipts()
    assert receipt["principal"] == {"agent": "support-bot", "user": "alice"}


def test_an_approval_pauses_and_a_grant_resumes_it_once(toolset, ran, control, store):
    call = ("refund", {"payment_id": "pay_big", "amount": 200_000})
    agent = agent_for(scripted(call), toolset)
    paused = asyncio.run(agent.run("refund pay_big"))
    assert isinstance(paused.output, DeferredToolRequests) and ran == []
    [pending] = paused.output.approvals
    metadata = paused.output.metadata[pending.tool_call_id]
    assert metadata["summary"].startswith('stripe.refund {"amount":200000')
    control.approvals.grant(metadata["ctrlrun_request_id"], "bob")
    resumed = asyncio.run(
        agent.run(
            message_history=paused.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={pending.tool_call_id: True}),
        )
    )
    assert resumed.output == "refunded 200000" and ran == [("pay_big", 200_000)]
    [receipt] = [r for r in store.receipts() if r["result"] == "committed"]
    assert receipt["approver"] == "bob"


def test_an_approver_who_edits_the_arguments_gets_a_denial(toolset, ran, control):
    agent = agent_for(scripted(("refund", {"payment_id": "pay_big", "amount": 200_000})), toolset)
    paused = asyncio.run(agent.run("refund pay_big"))
    [pending] = paused.output.approvals
    control.approvals.grant(
        paused.output.metadata[pending.tool_call_id]["ctrlrun_request_id"], "bob"
    )
    edited = ToolApproved(override_args={"payment_id": "pay_big", "amount": 900_000})
    resumed = asyncio.run(
        agent.run(
            message_history=paused.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={pending.tool_call_id: edited}),
        )
    )
    assert resumed.output.startswith("Denied: this call was not approved") and ran == []


def test_a_repeated_call_gets_the_duplicate_text_with_the_stored_result(toolset, ran):
    call = ("refund", {"payment_id": "pay_1", "amount": 5})
    agent = agent_for(scripted(call, call), toolset)
    result = asyncio.run(agent.run("refund pay_1 twice"))
    assert ran == [("pay_1", 5)]
    assert "Already done" in result.output and 'its result was "refunded 5"' in result.output


def test_a_denied_call_is_a_final_result_the_model_reads(toolset, ran):
    agent = agent_for(scripted(("refund", {"payment_id": "pay_x", "amount": 50_000_000})), toolset)
    result = asyncio.run(agent.run("refund a fortune"))
    assert result.output.startswith("Not allowed") and ran == []


def test_a_lost_reply_is_ambiguous_and_the_model_s_retry_is_refused(control, ran, store):
    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        ran.append(payment_id)
        raise TimeoutError("the provider's reply was lost")

    toolset = CtrlrunToolset(
        FunctionToolset([refund]), principal=lambda ctx: ctrlrun.Principal("support-bot")
    )
    call = ("refund", {"payment_id": "pay_1", "amount": 5})
    result = asyncio.run(agent_for(scripted(call, call), toolset).run("refund pay_1"))
    assert ran == ["pay_1"]  # the retry never reached the provider
    assert store.get_effect("refund:pay_1").state is ctrlrun.EffectState.AMBIGUOUS
    assert "unknown" in result.output.lower()


@pytest.mark.parametrize("amount", [200_000, 300_000], ids=["identical", "same-key"])
def test_a_committed_key_is_answered_without_deferring(toolset, ran, store, committed_big, amount):
    request_id = committed_big()
    agent = agent_for(scripted(("refund", {"payment_id": "pay_big", "amount": amount})), toolset)
    result = asyncio.run(agent.run("refund pay_big again"))
    assert not isinstance(result.output, DeferredToolRequests)  # nobody is asked
    assert result.output.startswith("Already done") and "refunded 200000" in result.output
    assert [a.approval_id for a in store.list_approvals()] == [request_id] and ran == []


def test_a_denial_tells_the_model_the_approver_s_reason(toolset, ran, control):
    agent = agent_for(scripted(("refund", {"payment_id": "pay_big", "amount": 200_000})), toolset)
    paused = asyncio.run(agent.run("refund big"))
    [call] = paused.output.approvals
    request_id = (
        call.tool_call_id and paused.output.metadata[call.tool_call_id]["ctrlrun_request_id"]
    )
    control.approvals.deny(request_id, "carol", "the bank already refunded it")
    resumed = asyncio.run(
        agent.run(
            message_history=paused.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
        )
    )
    assert "the bank already refunded it" in resumed.output and ran == []


def test_the_brake_ends_a_run_that_repeats_a_refused_call(protected_refund, ran, store):
    tools = FunctionToolset([protected_refund])
    toolset = CtrlrunToolset(tools, principal=lambda ctx: ctrlrun.Principal("bot"), max_refusals=3)
    denied = ("refund", {"payment_id": "x", "amount": 90_000_000})
    with pytest.raises(ctrlrun.RefusalLoop) as stopped:
        asyncio.run(agent_for(scripted(*[denied] * 5), toolset).run("refund a fortune"))
    assert stopped.value.refusals == 3 and stopped.value.last.startswith("Not allowed")
    assert [r["result"] for r in store.receipts()] == ["denied"] * 3 and ran == []
    again = asyncio.run(agent_for(scripted(denied, denied), toolset).run("a new run"))
    assert again.output.startswith("Not allowed")
