"""The MCP gateway against a real upstream MCP server run as a stdio subprocess, with an
in-process MCP client, on both stores: tools the policy does not name are hidden and refused;
an allowed call runs once and returns its receipt id in _meta; an approval round trip; an
upstream error is AMBIGUOUS unless the tool is declared to fail before acting; a repeated call
is the duplicate text and never reaches the upstream."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

import ctrlrun
from ctrlrun import Control, EffectState
from ctrlrun.config import load_policy_text
from ctrlrun.integrations.mcp import RECEIPT_META, Gateway

TESTS = Path(__file__).resolve().parents[1]

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  mcp.pay.refund:
    effect: "refund:{payment_id}"
    rules:
      - when: {amount_lte: 1000}
        decision: allow
      - decision: approve
  mcp.pay.explode:
    decision: allow
    effect: "explode:{payment_id}"
  mcp.pay.decline:
    decision: allow
    effect: "decline:{payment_id}"
  mcp.pay.hang:
    decision: allow
    effect: "hang:{payment_id}"
"""


@pytest.fixture
def control(store, clock):
    return Control(load_policy_text(POLICY), store, clock=clock)


@pytest.fixture
def calls(tmp_path):
    folder = tmp_path / "calls"
    folder.mkdir()
    return folder


def through_gateway(control, calls, work):
    """Run ``work(client, gateway)`` with a gateway in front of the stdio upstream."""
    upstream = StdioServerParameters(
        command=sys.executable,
        args=["-m", "support.mcp_upstream", str(calls)],
        cwd=str(TESTS),
    )

    async def main():
        async with Client(upstream) as connected:
            gateway = Gateway(
                control,
                connected,
                alias="pay",
                principal=ctrlrun.Principal("desktop-agent", "alice"),
                not_executed_on_error=["decline"],
            )
            async with Client(gateway.server()) as client:
                return await work(client, gateway)

    return anyio.run(main)


def text(result):
    return " ".join(getattr(block, "text", "") for block in result.content)


def ran(calls, prefix):
    return sorted(p.name for p in calls.iterdir() if p.name.startswith(prefix))


def test_only_named_tools_are_listed_and_others_are_refused(control, calls, store):
    async def work(client, gateway):
        names = sorted(t.name for t in (await client.list_tools()).tools)
        refused = await client.call_tool("secret", {"x": 1})
        return names, refused

    names, refused = through_gateway(control, calls, work)
    assert names == ["decline", "explode", "hang", "refund"]
    assert refused.is_error and text(refused).startswith("Not allowed")
    assert [r["result"] for r in store.receipts()] == ["denied"]


def test_an_allowed_call_runs_once_and_carries_its_receipt(control, calls, store):
    async def work(client, gateway):
        first = await client.call_tool("refund", {"payment_id": "pay_1", "amount": 5})
        again = await client.call_tool("refund", {"payment_id": "pay_1", "amount": 5})
        return first, again

    first, again = through_gateway(control, calls, work)
    assert not first.is_error and text(first) == "refunded 5 on pay_1"
    [receipt] = [r for r in store.receipts() if r["result"] == "committed"]
    assert first.meta[RECEIPT_META] == receipt.receipt_id
    assert again.is_error and text(again).startswith("Already done")
    assert len(ran(calls, "refund-pay_1")) == 1


def test_an_approval_round_trip(control, calls, store):
    async def ask(client, gateway):
        return await client.call_tool("refund", {"payment_id": "pay_big", "amount": 5000})

    waiting = through_gateway(control, calls, ask)
    assert waiting.is_error and "ctrlrun approve apr_" in text(waiting)
    [request] = store.list_approvals()
    control.approvals.grant(request.approval_id, "bob")
    done = through_gateway(control, calls, ask)
    assert text(done) == "refunded 5000 on pay_big" and len(ran(calls, "refund-pay_big")) == 1
    [receipt] = [r for r in store.receipts() if r["result"] == "committed"]
    assert receipt["approver"] == "bob"
    assert receipt["principal"] == {"agent": "desktop-agent", "user": "alice"}


def test_an_upstream_error_is_ambiguous_unless_declared_before_acting(control, calls, store):
    async def work(client, gateway):
        exploded = await client.call_tool("explode", {"payment_id": "p1"})
        retried = await client.call_tool("explode", {"payment_id": "p1"})
        declined = await client.call_tool("decline", {"payment_id": "p2"})
        return exploded, retried, declined

    exploded, retried, declined = through_gateway(control, calls, work)
    assert exploded.is_error and "unknown" in text(exploded)
    assert store.get_effect("explode:p1").state is EffectState.AMBIGUOUS
    assert retried.is_error and len(ran(calls, "explode-p1")) == 1  # the retry never went up
    assert declined.is_error and store.get_effect("decline:p2").state is EffectState.FAILED


def test_the_cli_gateway_serves_over_stdio(tmp_path, calls):
    """`ctrlrun gateway` as an MCP client launches it (a desktop assistant's stdio config)."""
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db", create=True)
    store.close()
    upstream = f"{sys.executable} -m support.mcp_upstream {calls}"
    script = Path(sys.executable).with_name("ctrlrun")
    served = StdioServerParameters(
        command=str(script),
        args=[
            "gateway",
            "--upstream-stdio",
            upstream,
            "--alias",
            "pay",
            "--principal",
            "desktop-agent/alice",
            "--policy",
            str(policy),
            "--store-url",
            f"sqlite:///{tmp_path / 'state.db'}",
        ],
        cwd=str(TESTS),
    )

    async def main():
        async with Client(served) as client:
            names = sorted(t.name for t in (await client.list_tools()).tools)
            done = await client.call_tool("refund", {"payment_id": "pay_cli", "amount": 7})
            return names, done

    names, done = anyio.run(main)
    assert (
        names == ["decline", "explode", "hang", "refund"] and text(done) == "refunded 7 on pay_cli"
    )
    reopened = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    try:
        [receipt] = reopened.receipts()
        assert receipt["principal"] == {"agent": "desktop-agent", "user": "alice"}
        assert receipt["action"] == "mcp.pay.refund" and receipt["result"] == "committed"
    finally:
        reopened.close()


def test_eight_concurrent_clients_on_one_effect_key_run_it_once(control, calls, store):
    async def work(client, gateway):
        answers = []

        async def one():
            async with Client(gateway.server()) as own:
                answers.append(await own.call_tool("refund", {"payment_id": "pay_c", "amount": 9}))

        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(one)
        return answers

    answers = through_gateway(control, calls, work)
    assert len(answers) == 8 and len(ran(calls, "refund-pay_c")) == 1
    assert sum(not a.is_error for a in answers) == 1
    assert store.get_effect("refund:pay_c").state is EffectState.COMMITTED


def test_an_upstream_killed_mid_call_is_ambiguous_and_the_re_call_refused(control, calls, store):
    pid_file = calls / "upstream.pid"

    async def work(client, gateway):
        answers = []

        async def call():
            answers.append(await client.call_tool("hang", {"payment_id": "p9"}))

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            with anyio.fail_after(30):
                while not pid_file.exists():  # the tool has acted: it wrote its pid
                    await anyio.sleep(0.01)
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        return answers[0]

    lost = through_gateway(control, calls, work)
    assert lost.is_error and "unknown" in text(lost)
    assert store.get_effect("hang:p9").state is EffectState.AMBIGUOUS

    async def again(client, gateway):
        return await client.call_tool("hang", {"payment_id": "p9"})

    refused = through_gateway(control, calls, again)
    assert refused.is_error and len(ran(calls, "hang-p9")) == 1


def test_the_cli_gateway_serves_streamable_http_on_loopback_only(tmp_path, calls):
    import http.client
    import subprocess

    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    ctrlrun.SQLiteStateStore(tmp_path / "state.db", create=True).close()
    upstream = f"{sys.executable} -m support.mcp_upstream {calls}"
    script = Path(sys.executable).with_name("ctrlrun")
    args = [str(script), "gateway", "--upstream-stdio", upstream, "--alias", "pay"]
    args += ["--principal", "web-agent", "--policy", str(policy), "--listen", "127.0.0.1:0"]
    args += ["--store-url", f"sqlite:///{tmp_path / 'state.db'}"]
    served = subprocess.Popen(args, cwd=TESTS, stderr=subprocess.PIPE, text=True)
    try:
        line = served.stderr.readline()  # "gateway on http://127.0.0.1:PORT/mcp"
        assert line.startswith("gateway on http://127.0.0.1:"), line
        url = line.split()[-1]
        port = int(url.rsplit(":", 1)[1].split("/")[0])

        async def main():
            async with Client(url) as client:
                return await client.call_tool("refund", {"payment_id": "pay_h", "amount": 3})

        assert text(anyio.run(main)) == "refunded 3 on pay_h"
        initialize = (
            '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
            '"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
        )
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        statuses = {}
        for name in (f"127.0.0.1:{port}", "evil.example"):
            probe = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            probe.request("POST", "/mcp", body=initialize, headers={**headers, "Host": name})
            statuses[name] = probe.getresponse().status
            probe.close()
        assert statuses[f"127.0.0.1:{port}"] == 200
        assert statuses["evil.example"] in (403, 421)  # a rebound name is not served
    finally:
        served.terminate()
        served.wait(timeout=30)


def test_a_gateway_without_a_principal_refuses_anonymous_calls(control, calls, store):
    async def work(client, gateway):
        gateway.principal = None
        return await client.call_tool("refund", {"payment_id": "pay_1", "amount": 5})

    refused = through_gateway(control, calls, work)
    assert refused.is_error and "anonymous" in text(refused)
    assert not store.receipts() and not ran(calls, "refund")


def test_a_server_you_own_is_guarded_by_the_call_tool_middleware(control, store):
    """guard_call_tool wraps a low-level server's own handler: the same decisions, at most
    once, approvals and receipts, with no upstream in between."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from ctrlrun.integrations.mcp import guard_call_tool

    executed = []

    async def handler(ctx, params):
        executed.append(params.arguments["payment_id"])
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"refunded {params.arguments['amount']}")]
        )

    async def list_tools(ctx, params):
        schema = {
            "type": "object",
            "properties": {"payment_id": {"type": "string"}, "amount": {"type": "integer"}},
        }
        return types.ListToolsResult(tools=[types.Tool(name="refund", input_schema=schema)])

    guarded = guard_call_tool(
        handler, control, alias="pay", principal=ctrlrun.Principal("own-server")
    )
    server = Server("payments", on_list_tools=list_tools, on_call_tool=guarded)

    async def main():
        async with Client(server) as client:
            first = await client.call_tool("refund", {"payment_id": "pay_o", "amount": 4})
            again = await client.call_tool("refund", {"payment_id": "pay_o", "amount": 4})
            big = await client.call_tool("refund", {"payment_id": "pay_b", "amount": 4000})
            return first, again, big

    first, again, big = anyio.run(main)
    assert text(first) == "refunded 4" and first.meta[RECEIPT_META].startswith("rcp_")
    assert again.is_error and text(again).startswith("Already done")
    assert big.is_error and "ctrlrun approve apr_" in text(big)
    assert executed == ["pay_o"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_both_protocol_eras_are_served(control, calls, store, mode):
    """The handshake era (``legacy``) and the stateless 2026-07-28 era (``auto`` negotiates it
    with this SDK's server) both list and call through the gateway."""

    async def work(client, gateway):
        async with Client(gateway.server(), mode=mode) as chosen:
            names = sorted(t.name for t in (await chosen.list_tools()).tools)
            done = await chosen.call_tool("refund", {"payment_id": f"pay_{mode}", "amount": 2})
            return names, done

    names, done = through_gateway(control, calls, work)
    assert "refund" in names and text(done) == f"refunded 2 on pay_{mode}"


def test_an_upstream_over_streamable_http(tmp_path, calls):
    """`ctrlrun gateway --upstream-url` in front of an upstream served over HTTP on loopback."""
    import subprocess

    upstream = subprocess.Popen(
        [sys.executable, "-m", "support.mcp_upstream", str(calls), "--http"],
        cwd=TESTS,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(upstream.stdout.readline())
        policy = tmp_path / "ctrlrun.yaml"
        policy.write_text(POLICY)
        ctrlrun.SQLiteStateStore(tmp_path / "state.db", create=True).close()
        script = Path(sys.executable).with_name("ctrlrun")
        args = ["gateway", "--upstream-url", f"http://127.0.0.1:{port}/mcp", "--alias", "pay"]
        args += ["--principal", "desktop-agent", "--policy", str(policy)]
        args += ["--store-url", f"sqlite:///{tmp_path / 'state.db'}"]
        served = StdioServerParameters(command=str(script), args=args)

        async def main():
            async with Client(served) as client:
                return await client.call_tool("refund", {"payment_id": "pay_u", "amount": 6})

        assert text(anyio.run(main)) == "refunded 6 on pay_u"
        assert len(ran(calls, "refund-pay_u")) == 1
    finally:
        upstream.terminate()
        upstream.wait(timeout=30)


def test_a_client_that_elicits_urls_is_pointed_at_the_console(control, calls, store):
    """With a console URL configured, a client declaring URL-mode elicitation gets a -32042
    elicitation naming the request in the console; one that does not gets the tool error."""
    from mcp import MCPError

    async def elicit(ctx, params):  # its mere presence declares the capability
        raise AssertionError("the gateway answers with an error, it does not ask")

    async def work(client, gateway):
        gateway.console_url = "http://127.0.0.1:8738"
        plain = await client.call_tool("refund", {"payment_id": "pay_e", "amount": 5000})
        async with Client(gateway.server(), elicitation_callback=elicit) as eliciting:
            try:
                await eliciting.call_tool("refund", {"payment_id": "pay_e", "amount": 5000})
            except MCPError as raised:
                return plain, raised
        return plain, None

    plain, raised = through_gateway(control, calls, work)
    [request] = store.list_approvals()  # one request: the second call found the first
    assert plain.is_error and plain.meta["ctrlrun/approval_request_id"] == request.approval_id
    assert raised is not None and raised.error.code == -32042
    [offered] = raised.error.data["elicitations"]
    assert offered["url"] == f"http://127.0.0.1:8738/#request-{request.approval_id}"


def test_an_in_memory_upstream(control, store):
    """The upstream as an in-process MCPServer (no transport at all)."""
    from mcp.server.mcpserver import MCPServer

    upstream = MCPServer("in-memory")
    executed = []

    @upstream.tool()
    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        executed.append(payment_id)
        return f"refunded {amount} on {payment_id}"

    async def main():
        async with Client(upstream) as connected:
            gateway = Gateway(
                control, connected, alias="pay", principal=ctrlrun.Principal("in-memory-agent")
            )
            async with Client(gateway.server()) as client:
                first = await client.call_tool("refund", {"payment_id": "pay_m", "amount": 1})
                again = await client.call_tool("refund", {"payment_id": "pay_m", "amount": 1})
                return first, again

    first, again = anyio.run(main)
    assert text(first) == "refunded 1 on pay_m" and again.is_error and executed == ["pay_m"]
