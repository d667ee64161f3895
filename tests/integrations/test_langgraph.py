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
from ctrlrun import Control, Policy
from ctrlrun.integrations.langgraph import CtrlrunMiddleware
from support.policies import POLICY

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
def control(store, clock):
    return Control(Policy.from_yaml(POLICY), store, clock=clock)


@pytest.fixture
def ran():
    return []


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


@pytest.fixture
def refund(control, ran, mode):
    if mode == "sync":

        @ctrlrun.protect("stripe.refund", control=control)
        def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            ran.append((payment_id, amount))
            return f"refunded {amount}"

    else:

        @ctrlrun.protect("stripe.refund", control=control)
        async def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            ran.append((payment_id, amount))
            return f"refunded {amount}"

    return as_tool(refund)


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
    assert first == "refunded 5" and "already" in second.lower() and ran == [("pay_1", 5)]
