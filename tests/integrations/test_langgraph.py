"""LangGraph through langchain's create_agent, offline (a scripted fake chat model and an
in-memory checkpointer), on both stores: an allowed call runs once; an approval interrupts the
graph with the request, a grant through ctrlrun and Command(resume=…) run it once (no second
request on the node's re-run); a resume without a grant is a denial, never a run; refusals are
final ToolMessages that a retry middleware outside the guard does not retry; sync and async."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool as as_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

import ctrlrun
from ctrlrun.integrations.langgraph import CtrlrunMiddleware

ids = itertools.count()


class Scripted(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


def model(*calls):
    """Tool calls (name, args) one per turn, then a final answer."""
    turns = [
        AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{next(ids)}"}])
        for name, args in calls
    ]
    return Scripted(messages=iter([*turns, AIMessage("done")]))


@pytest.fixture
def refund(protected_refund):
    return as_tool(protected_refund)


def agent(chat, refund, *middleware):
    guard = CtrlrunMiddleware(principal=lambda request: ctrlrun.Principal("support-bot", "alice"))
    return create_agent(
        chat, [refund], middleware=[*middleware, guard], checkpointer=InMemorySaver()
    )


def invoke(graph, mode, value, thread="t1"):
    config = {"configurable": {"thread_id": thread}}
    if mode == "sync":
        return graph.invoke(value, config)
    return asyncio.run(graph.ainvoke(value, config))


def tool_texts(result):
    return [m.content for m in result["messages"] if m.type == "tool"]


def ask(text):
    return {"messages": [{"role": "user", "content": text}]}


def test_an_allowed_call_runs_once(refund, ran, mode, store):
    graph = agent(model(("refund", {"payment_id": "pay_1", "amount": 5})), refund)
    result = invoke(graph, mode, ask("refund"))
    assert tool_texts(result) == ["refunded 5"] and ran == [("pay_1", 5)]
    assert store.receipts()[-1]["principal"]["agent"] == "support-bot"


def test_an_approval_interrupts_and_a_grant_resumes_it_once(refund, ran, mode, control, store):
    call = ("refund", {"payment_id": "pay_big", "amount": 200_000})
    graph = agent(model(call), refund)
    paused = invoke(graph, mode, ask("refund big"))
    [pause] = paused["__interrupt__"]
    request_id = pause.value["ctrlrun_request_id"]
    assert pause.value["arguments"] == {"payment_id": "pay_big", "amount": 200_000}
    control.approvals.grant(request_id, "bob")
    resumed = invoke(graph, mode, Command(resume="approved"))
    assert tool_texts(resumed) == ["refunded 200000"] and ran == [("pay_big", 200_000)]
    assert len(store.list_approvals()) == 1  # the re-run made no second request
    [receipt] = [r for r in store.receipts() if r["result"] == "committed"]
    assert receipt["approver"] == "bob"


def test_a_resume_without_a_grant_is_a_denial(refund, ran, mode):
    graph = agent(model(("refund", {"payment_id": "pay_big", "amount": 200_000})), refund)
    invoke(graph, mode, ask("refund big"))
    resumed = invoke(graph, mode, Command(resume="approved"))
    assert tool_texts(resumed)[0].startswith("Denied: the graph was resumed") and ran == []


def test_a_refusal_is_final_even_with_a_retry_middleware_outside(refund, ran, mode):
    call = ("refund", {"payment_id": "pay_x", "amount": 50_000_000})
    graph = agent(model(call), refund, ToolRetryMiddleware(max_retries=3))
    result = invoke(graph, mode, ask("refund a fortune"))
    [text] = tool_texts(result)
    assert text.startswith("Not allowed") and ran == []


def test_a_repeated_call_gets_the_duplicate_text(refund, ran, mode):
    call = ("refund", {"payment_id": "pay_1", "amount": 5})
    result = invoke(agent(model(call, call), refund), mode, ask("refund twice"))
    first, second = tool_texts(result)
    assert first == "refunded 5" and ran == [("pay_1", 5)]
    assert second.startswith("Already done") and 'its result was "refunded 5"' in second


def test_a_bare_tool_node_with_a_retry_policy_runs_a_refusal_once(refund, ran, mode, store):
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode
    from langgraph.types import RetryPolicy

    guard = CtrlrunMiddleware(principal=lambda request: ctrlrun.Principal("support-bot"))
    node = ToolNode([refund], wrap_tool_call=guard.wrap, awrap_tool_call=guard.awrap)
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node, retry_policy=RetryPolicy(max_attempts=3))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    call = {"name": "refund", "args": {"payment_id": "pay_x", "amount": 90_000_000}, "id": "c1"}
    result = invoke(graph, mode, {"messages": [AIMessage("", tool_calls=[call])]})
    [text] = tool_texts(result)
    assert text.startswith("Not allowed") and ran == []
    assert len(store.receipts()) == 1  # decided once: nothing retried it


def test_a_lost_reply_is_ambiguous_and_the_model_s_retry_is_refused(control, ran, mode, store):
    @ctrlrun.protect("stripe.refund", control=control)
    def lossy(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        ran.append(payment_id)
        raise TimeoutError("the provider's reply was lost")

    call = ("lossy", {"payment_id": "pay_1", "amount": 5})
    result = invoke(agent(model(call, call), as_tool(lossy)), mode, ask("refund"))
    first, second = tool_texts(result)
    assert "unknown" in first.lower() and ran == ["pay_1"]
    assert store.get_effect("refund:pay_1").state is ctrlrun.EffectState.AMBIGUOUS
    assert "ambiguous" in second.lower() or "unknown" in second.lower()


@pytest.mark.parametrize("amount", [200_000, 300_000], ids=["identical", "same-key"])
def test_a_committed_key_is_answered_without_interrupting(
    refund, ran, mode, store, committed_big, amount
):
    request_id = committed_big()
    graph = agent(model(("refund", {"payment_id": "pay_big", "amount": amount})), refund)
    result = invoke(graph, mode, ask("refund pay_big again"))
    assert "__interrupt__" not in result  # nobody is asked
    [text] = tool_texts(result)
    assert text.startswith("Already done") and 'its result was "refunded 200000"' in text
    assert [a.approval_id for a in store.list_approvals()] == [request_id] and ran == []


def test_a_refusal_names_its_tool(refund, ran, mode):
    result = invoke(
        agent(model(("refund", {"payment_id": "x", "amount": 90_000_000})), refund), mode, ask("go")
    )
    [message] = [m for m in result["messages"] if m.type == "tool"]
    assert message.name == "refund" and message.status == "error" and ran == []


def test_a_denial_tells_the_model_the_approver_s_reason(refund, ran, mode, control):
    graph = agent(model(("refund", {"payment_id": "pay_big", "amount": 200_000})), refund)
    [pause] = invoke(graph, mode, ask("refund big"))["__interrupt__"]
    control.approvals.deny(
        pause.value["ctrlrun_request_id"], "carol", "the bank already refunded it"
    )
    resumed = invoke(graph, mode, Command(resume="answered"))
    [text] = tool_texts(resumed)
    assert "the bank already refunded it" in text and "Do not retry" in text and ran == []


def test_the_brake_ends_a_run_that_repeats_a_refused_call(refund, ran, mode, store):
    denied = ("refund", {"payment_id": "x", "amount": 90_000_000})
    chat = model(*[denied] * 5)
    guard = CtrlrunMiddleware(principal=lambda request: ctrlrun.Principal("bot"), max_refusals=3)
    graph = create_agent(chat, [refund], middleware=[guard], checkpointer=InMemorySaver())
    result = invoke(graph, mode, ask("refund a fortune"))
    first, second, third = tool_texts(result)
    assert first.startswith("Not allowed") and second.startswith("Not allowed")
    assert third.startswith("Stopped: this exact call was refused 3 times")
    assert result["messages"][-1].type == "tool"  # the run ended there: no model turn after
    assert [r["result"] for r in store.receipts()] == ["denied"] * 3 and ran == []
    again = invoke(graph, mode, ask("try once more"))  # a new run counts afresh
    assert [t[:11] for t in tool_texts(again)[3:]] == ["Not allowed", "Not allowed"]
    assert again["messages"][-1].content == "done"
