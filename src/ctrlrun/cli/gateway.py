"""``ctrlrun gateway``: serve an upstream MCP server's tools over stdio, under ctrlrun."""

from __future__ import annotations

import shlex
import socket
from typing import Any

import click

from ctrlrun.cli.common import Refusal, listen_address, say, store_url_option
from ctrlrun.loopback import is_loopback


@click.command("gateway")
@click.option(
    "--upstream-stdio",
    "command",
    metavar="CMD",
    help="The upstream MCP server's command line, run as a subprocess speaking stdio.",
)
@click.option(
    "--upstream-url",
    "url",
    metavar="URL",
    help="Or: the upstream MCP server's streamable HTTP endpoint (http(s)://…/mcp).",
)
@click.option("--alias", required=True, help="Its tools are the actions mcp.<alias>.<tool>.")
@click.option(
    "--principal",
    required=True,
    metavar="AGENT[/USER]",
    help="Who every call is made as (the client cannot choose).",
)
@click.option(
    "--not-executed-on-error",
    "quiet",
    multiple=True,
    metavar="TOOL",
    help="A tool whose errors always come before it acts (its error is FAILED, not AMBIGUOUS).",
)
@click.option("--policy", "policy", metavar="PATH", help="The policy file (ctrlrun.yaml).")
@click.option(
    "--listen",
    metavar="HOST:PORT",
    help="Serve over streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any).",
)
@click.option("--allow-remote", is_flag=True, help="With --listen: a non-loopback address.")
@click.option(
    "--console-url",
    metavar="URL",
    help="The ctrlrun console's address: clients that elicit URLs are sent there to approve.",
)
@store_url_option
def gateway(  # noqa: PLR0917 - click passes one argument per option
    command: str | None,
    url: str | None,
    alias: str,
    principal: str,
    quiet: tuple[str, ...],
    policy: str | None,
    listen: str | None,
    allow_remote: bool,
    console_url: str | None,
    store_url: str | None,
) -> None:
    """Serve the upstream MCP server's tools over stdio (or streamable HTTP with --listen):
    only the tools the policy names are listed, and every call goes through ctrlrun
    (docs/gateway.md)."""
    import anyio

    import ctrlrun

    if (command is None) == (url is None):
        raise click.UsageError("give exactly one of --upstream-stdio and --upstream-url")
    argv = shlex.split(command) if command is not None else [url or ""]
    if not argv or not argv[0]:
        raise Refusal("the upstream is empty: give the server's command line or URL")
    agent, _, user = principal.partition("/")
    who = ctrlrun.Principal(agent, user or None)
    sock = None if listen is None else _listening(listen, allow_remote=allow_remote)
    control = _control(policy, store_url)
    upstream = _upstream(argv, url is not None)
    anyio.run(_serve, control, upstream, alias, who, (quiet, console_url), sock)


def _upstream(argv: list[str], is_url: bool) -> Any:
    from mcp import StdioServerParameters

    if is_url:
        if not argv[0].startswith(("http://", "https://")):
            raise Refusal(f"--upstream-url takes http(s)://…, got {argv[0]!r}")
        return argv[0]  # mcp.Client connects to a URL over streamable HTTP
    return StdioServerParameters(command=argv[0], args=argv[1:])


def _listening(listen: str, *, allow_remote: bool) -> socket.socket:
    host, port = listen_address(listen, allow_remote=allow_remote, what="gateway")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Refusal(f"cannot listen on {listen}: {exc.strerror or exc}") from exc
    sock.listen(128)
    return sock


def _control(policy: str | None, store_url: str | None) -> object:
    import ctrlrun
    from ctrlrun.store import open_store

    if store_url is None:
        return ctrlrun.Control.from_file(policy)
    return ctrlrun.Control.from_file(policy, store=open_store(store_url, existing=True))


async def _serve(  # noqa: PLR0917 - the command's parts, passed through anyio.run
    control: object,
    upstream: Any,
    alias: str,
    who: object,
    options: tuple[tuple[str, ...], str | None],
    sock: socket.socket | None,
) -> None:
    from mcp import Client
    from mcp.server.stdio import stdio_server

    from ctrlrun.integrations.mcp import Gateway

    async with Client(upstream) as connected:
        served = Gateway(
            control,  # type: ignore[arg-type]
            connected,
            alias=alias,
            principal=who,  # type: ignore[arg-type]
            not_executed_on_error=options[0],
            console_url=options[1],
        ).server()
        if sock is not None:
            await _serve_http(served, sock)
            return
        async with stdio_server() as (read, write):
            await served.run(read, write, served.create_initialization_options())


async def _serve_http(served: Any, sock: socket.socket) -> None:
    """Streamable HTTP on ``sock``; on loopback the SDK answers only Host and Origin values
    naming loopback (DNS rebinding)."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    app = served.streamable_http_app(host=host if is_loopback(host) else "0.0.0.0")  # noqa: S104
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    shown = f"[{host}]" if ":" in host else host
    say(f"gateway on http://{shown}:{port}/mcp", err=True)
    await uvicorn.Server(config).serve(sockets=[sock])
