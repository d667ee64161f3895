"""``ctrlrun gateway``: serve an upstream MCP server's tools over stdio, under ctrlrun."""

from __future__ import annotations

import shlex

import click

from ctrlrun.cli.common import Refusal, store_url_option


@click.command("gateway")
@click.option(
    "--upstream-stdio",
    "command",
    required=True,
    metavar="CMD",
    help="The upstream MCP server's command line, run as a subprocess speaking stdio.",
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
@store_url_option
def gateway(  # noqa: PLR0917 - click passes one argument per option
    command: str,
    alias: str,
    principal: str,
    quiet: tuple[str, ...],
    policy: str | None,
    store_url: str | None,
) -> None:
    """Serve the upstream MCP server's tools over stdio: only the tools the policy names are
    listed, and every call goes through ctrlrun (docs/gateway.md)."""
    import anyio

    import ctrlrun

    argv = shlex.split(command)
    if not argv:
        raise Refusal("--upstream-stdio is empty: give the upstream server's command line")
    agent, _, user = principal.partition("/")
    who = ctrlrun.Principal(agent, user or None)
    control = _control(policy, store_url)
    anyio.run(_serve, control, argv, alias, who, quiet)


def _control(policy: str | None, store_url: str | None) -> object:
    import ctrlrun
    from ctrlrun.store import open_store

    store = open_store(store_url, existing=True) if store_url else None
    kwargs = {"store": store} if store is not None else {}
    return ctrlrun.Control.from_file(policy, **kwargs)


async def _serve(
    control: object, argv: list[str], alias: str, who: object, quiet: tuple[str, ...]
) -> None:
    from mcp import Client, StdioServerParameters
    from mcp.server.stdio import stdio_server

    from ctrlrun.integrations.mcp import Gateway

    upstream = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(upstream) as connected:
        served = Gateway(
            control,  # type: ignore[arg-type]
            connected,
            alias=alias,
            principal=who,  # type: ignore[arg-type]
            not_executed_on_error=quiet,
        ).server()
        async with stdio_server() as (read, write):
            await served.run(read, write, served.create_initialization_options())
