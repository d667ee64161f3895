"""A real upstream MCP server (the SDK's MCPServer), run as a subprocess by the gateway
tests: ``python -m support.mcp_upstream CALLS_DIR`` (stdio), or with ``--http`` over
streamable HTTP on a free loopback port, which it prints first. Every execution of
``refund`` leaves a marker file in CALLS_DIR, so "ran exactly once" is visible across
processes; ``explode`` acts and then reports an error; ``decline`` reports an error before
acting; ``hang`` acts and never answers; ``secret`` is a tool the policy does not name."""

from __future__ import annotations

import os
import sys
import threading
import uuid

from mcp.server.mcpserver import MCPServer

server = MCPServer("payments")
CALLS = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "."


def mark(name: str) -> None:
    with open(os.path.join(CALLS, f"{name}-{uuid.uuid4().hex}"), "w") as out:
        out.write(name)


@server.tool()
def refund(payment_id: str, amount: int) -> str:
    """Refund a payment."""
    mark(f"refund-{payment_id}")
    return f"refunded {amount} on {payment_id}"


@server.tool()
def explode(payment_id: str) -> str:
    """Act, then fail."""
    mark(f"explode-{payment_id}")
    raise RuntimeError("exploded after acting")


@server.tool()
def decline(payment_id: str) -> str:
    """Fail before acting."""
    raise RuntimeError("declined: nothing done")


@server.tool()
def hang(payment_id: str) -> str:
    """Act, leave this process's pid, then never answer (the test kills the process)."""
    mark(f"hang-{payment_id}")
    with open(os.path.join(CALLS, "upstream.pid"), "w") as out:
        out.write(str(os.getpid()))
    threading.Event().wait()
    return "never"


@server.tool()
def secret(x: int) -> int:
    """Not in the policy."""
    return x


def serve_http() -> None:
    """Streamable HTTP on a free loopback port, printed first on stdout."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        serve_http()
    else:
        server.run("stdio")
