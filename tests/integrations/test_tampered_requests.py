"""A pending request whose stored action was rewritten in the database (SQLite file, Postgres
schema), its ``action_hash`` left alone: the identical call through each adapter and the MCP
gateway no longer pauses for a person on it; what the model and the app get says tampered,
and nothing runs. Sync and async tools, both stores."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from agents import Runner
from langchain_core.tools import tool as as_tool
from pydantic_ai import DeferredToolRequests

import ctrlrun
from ctrlrun.integrations.openai_agents import guarded_tool
from ctrlrun.integrations.pydantic_ai import CtrlrunToolset
from integrations import test_langgraph as lg
from integrations import test_mcp_gateway as mcp
from integrations import test_openai_agents as oa
from integrations import test_pydantic_ai as pa

BIG = {"payment_id": "pay_big", "amount": 200_000}


@pytest.fixture
def rewrite(request, store):
    """Rewrite every pending request's arguments in the database itself, hash untouched."""

    def rewrite() -> None:
        statement = (
            "UPDATE {t}approvals SET action_json = replace(action_json, '\"pay_big\"',"
            " '\"pay_small\"') WHERE status = 'pending'"
        )
        if store.dialect == "sqlite":
            with sqlite3.connect(store.path) as conn:
                assert conn.execute(statement.replace("{t}", "")).rowcount == 1
            conn.close()
            return
        from support.pg_sql import execute

        pg_schema = request.getfixturevalue("pg_schema")
        execute(pg_schema.url, pg_schema.schema, statement.replace("{t}", "{schema}."))

    return rewrite


def test_langgraph_reports_tampering_instead_of_pausing(protected_refund, ran, mode, rewrite):
    refund = as_tool(protected_refund)
    paused = lg.invoke(lg.agent(lg.model(("refund", BIG)), refund), mode, lg.ask("refund"))
    assert paused["__interrupt__"]
    rewrite()
    again = lg.invoke(lg.agent(lg.model(("refund", BIG)), refund), mode, lg.ask("refund"), "t2")
    assert "__interrupt__" not in again
    [text] = lg.tool_texts(again)
    assert "tampered" in text and ran == []


def test_pydantic_ai_reports_tampering_instead_of_pausing(protected_refund, ran, rewrite):
    tools = pa.FunctionToolset([protected_refund])
    toolset = CtrlrunToolset(tools, principal=lambda ctx: ctrlrun.Principal("support-bot", "a"))
    first = asyncio.run(pa.agent_for(pa.scripted(("refund", BIG)), toolset).run("refund"))
    assert isinstance(first.output, DeferredToolRequests)
    rewrite()
    again = asyncio.run(pa.agent_for(pa.scripted(("refund", BIG)), toolset).run("refund"))
    assert isinstance(again.output, str) and "tampered" in again.output and ran == []


def test_openai_agents_reports_tampering_instead_of_pausing(
    protected_refund, control, ran, rewrite
):
    tool = guarded_tool(protected_refund, control=control, principal=lambda ctx: oa.BOT)
    paused = asyncio.run(Runner.run(oa.agent(tool, BIG), "go"))
    assert paused.interruptions
    rewrite()
    again = asyncio.run(Runner.run(oa.agent(tool, BIG), "go"))
    assert not again.interruptions
    [output] = oa.tool_outputs(again)
    assert "tampered" in output and ran == []


def test_the_gateway_reports_tampering_instead_of_a_request(store, clock, tmp_path, rewrite):
    control = ctrlrun.Control(mcp.load_policy_text(mcp.POLICY), store, clock=clock)
    calls = tmp_path / "calls"
    calls.mkdir()

    async def ask(client, gateway):
        return await client.call_tool("refund", {"payment_id": "pay_big", "amount": 5000})

    waiting = mcp.through_gateway(control, calls, ask)
    assert "ctrlrun approve apr_" in mcp.text(waiting)
    rewrite()
    again = mcp.through_gateway(control, calls, ask)
    assert again.is_error and "tampered" in mcp.text(again)
    assert "ctrlrun approve" not in mcp.text(again) and mcp.ran(calls, "refund") == []
