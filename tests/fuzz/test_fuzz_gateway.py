"""The MCP gateway's tool-call arguments, fuzzed: whatever a client sends, the answer is a tool
result (an error text for a refusal), never an exception or a traceback, and a call the
gateway refuses reaches no upstream and reserves no effect key."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

import ctrlrun
from ctrlrun import Control
from ctrlrun.config import load_policy_text
from ctrlrun.integrations.mcp import Gateway
from support.fuzzing import budget

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  mcp.pay.refund:
    effect: "refund:{payment_id}:{amount:int}"
    rules:
      - when: {amount_lte: 1000}
        decision: allow
      - decision: deny
"""

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
ARGUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "payment_id": JSONISH | st.sampled_from(["pay_1", "", " pay", "a:b", "\u202e", "\x00"]),
        "amount": JSONISH | st.integers(-5, 2000),
        "extra": JSONISH,
    },
)


@pytest.fixture(scope="module")
def gateway_store(tmp_path_factory):
    store = ctrlrun.SQLiteStateStore(tmp_path_factory.mktemp("gw") / "state.db")
    yield store
    store.close()


@budget(15)
@given(st.sampled_from(["refund", "secret", ""]), ARGUMENTS)
def test_any_tool_call_is_answered_and_a_refusal_runs_nothing(gateway_store, tool, arguments):
    from mcp.server.mcpserver import MCPServer

    upstream = MCPServer("fuzzed")
    executed: list = []

    @upstream.tool()
    def refund(payment_id: object = None, amount: object = None, extra: object = None) -> str:
        """Refund a payment."""
        executed.append(payment_id)
        return "refunded"

    control = Control(load_policy_text(POLICY), gateway_store)

    async def main():
        async with Client(upstream) as connected:
            gateway = Gateway(control, connected, alias="pay", principal=ctrlrun.Principal("fz"))
            async with Client(gateway.server()) as client:
                return await client.call_tool(tool, arguments)

    effects_before = len(gateway_store.list_effects())
    result = anyio.run(main)
    shown = " ".join(getattr(block, "text", "") for block in result.content)
    assert "Traceback" not in shown
    if result.is_error and not executed:
        assert len(gateway_store.list_effects()) == effects_before, shown
