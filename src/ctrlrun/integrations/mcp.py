"""MCP: a gateway that gives an upstream MCP server's tools the whole of ctrlrun, for agents
that reach tools only through MCP and whose code cannot change (``ctrlrun gateway``).

``Gateway(control, upstream, alias=…, principal=…)`` serves, as an MCP server of its own
(``gateway.server()``), the tools of ``upstream`` (a connected ``mcp.Client``):

* ``tools/list`` shows only the tools whose action ``mcp.<alias>.<tool>`` the policy names: a
  tool the policy does not know is hidden from the model (and refused if called anyway).
* ``tools/call`` goes through ``Control`` with the call's arguments (its ``_meta`` is never
  hashed: clients put trace headers there). Outcomes: a complete result is COMMITTED; a result
  with ``isError`` is AMBIGUOUS (the tool may have acted before it failed) unless the tool is
  listed in ``not_executed_on_error`` (it errors only before acting: FAILED, retry allowed); an
  SDK-local error (closed connection, timeout) is AMBIGUOUS. The receipt id travels back in the
  result's ``_meta`` (``ctrlrun/receipt_id``). The ``ctrlrun/`` namespace of ``_meta`` is the
  gateway's: an upstream's own keys there are dropped before anything is decided or stored.
  Each call is built and decided under one read of the policy.
* A call that needs a person is answered with a tool error carrying the request id (also in
  ``_meta`` as ``ctrlrun/approval_request_id``) and what to do; once a person grants it, the
  identical re-call runs (identical calls share one request). With ``console_url`` set and a
  client that declares URL-mode elicitation, the call is answered instead with a URL
  elicitation (``-32042``) pointing at the request in the console.
  Every other refusal is a tool error with the model-facing text.
* The principal is fixed by the operator (flags), or over HTTP taken from a verified access
  token (its client id, and its subject as the user; ``server().streamable_http_app(
  token_verifier=…, auth=…)``); never from what the client says. No token and no fixed
  principal: refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import ctrlrun
from ctrlrun.errors import MissingDependency, NotExecuted
from ctrlrun.runtime.call import CallSpec
from ctrlrun.runtime.normalize import build_action

try:
    import mcp_types as types
    from mcp import Client, UrlElicitationRequiredError
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.lowlevel import Server
except ImportError as exc:  # pragma: no cover - the extra is installed in the dev env
    raise MissingDependency(module="mcp", extra="mcp") from exc

META_NAMESPACE = "ctrlrun/"
RECEIPT_META = "ctrlrun/receipt_id"
REQUEST_META = "ctrlrun/approval_request_id"

Caller = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]
"""Calls one tool for real: an upstream client's ``call_tool``, or a server's own handler."""


class UpstreamError(Exception):
    """The upstream answered ``isError``: what the tool did before failing is unknown."""

    def __init__(self, result: types.CallToolResult) -> None:
        super().__init__(_text(result) or "the upstream tool reported an error")
        self.result = result


class Gateway:
    """``upstream``'s tools under ``control``'s policy, as actions ``mcp.<alias>.<tool>``."""

    def __init__(
        self,
        control: ctrlrun.Control,
        upstream: Client,
        *,
        alias: str,
        principal: ctrlrun.Principal | None,
        not_executed_on_error: Iterable[str] = (),
        console_url: str | None = None,
    ) -> None:
        self.console_url = console_url.rstrip("/") if console_url else None
        self.control = control
        self.upstream = upstream
        self.alias = alias
        self.principal = principal
        self.not_executed_on_error = frozenset(not_executed_on_error)

    def action(self, tool: str) -> str:
        """The action name the policy knows ``tool`` by."""
        return f"mcp.{self.alias}.{tool}"

    def server(self) -> Server[Any]:
        """The MCP server clients connect to."""
        return Server(
            f"ctrlrun-gateway-{self.alias}",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        listed = await self.upstream.list_tools()
        policy = self.control.refresh_policy()
        tools = [t for t in listed.tools if policy.entry(self.action(t.name)) is not None]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> Any:
        result = await self.call(params.name, dict(params.arguments or {}))
        request_id = (result.meta or {}).get(REQUEST_META)
        if request_id and self.console_url and _offers_url_elicitation(ctx):
            raise UrlElicitationRequiredError(
                [
                    types.ElicitRequestURLParams(
                        message=f"{_text(result)}",
                        url=f"{self.console_url}/#request-{request_id}",
                        elicitation_id=str(request_id),
                    )
                ],
                message="a person must approve this call in the ctrlrun console",
            )
        return result

    def who(self) -> ctrlrun.Principal | None:
        """Who this call is made as: the client of a verified access token (its client id,
        and its subject as the user), else the fixed principal; None: refused."""
        token = get_access_token()
        if token is not None:
            return ctrlrun.Principal(token.client_id, token.subject)
        return self.principal

    async def call(
        self, tool: str, arguments: dict[str, Any], *, via: Caller | None = None
    ) -> types.CallToolResult:
        """Call ``tool`` under ctrlrun through ``via`` (default: the upstream client's
        ``call_tool``); the result the client receives."""
        upstream = via or self.upstream.call_tool
        quiet = tool in self.not_executed_on_error
        who = self.who()
        if who is None:
            return _error("Refused: anonymous calls are not served (no verified token).")

        async def executor(**canonical: Any) -> dict[str, Any]:
            result = await upstream(tool, canonical)
            result = _without_own_meta(result)  # the upstream cannot speak for ctrlrun
            if result.is_error:
                if quiet:
                    raise NotExecuted(_text(result) or "the tool refused before acting")
                raise UpstreamError(result)
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        try:
            policy = self.control.refresh_policy()  # one read decides the whole call
            action = build_action(policy, self.action(tool), arguments, who)
            value, receipt = await self.control.arun(action, executor, CallSpec(), policy=policy)
        except ctrlrun.ApprovalRequired as needed:
            waiting = _error(
                f"{needed.for_model()} Once a person approves it (`ctrlrun approve"
                f" {needed.request_id}`), the identical call runs."
            )
            return waiting.model_copy(update={"meta": {REQUEST_META: needed.request_id}})
        except ctrlrun.CtrlrunError as refused:
            return _error(refused.for_model())
        except UpstreamError as failed:
            return _error(f"The tool reported an error; whether it acted is unknown: {failed}")
        except Exception as lost:  # an SDK-local error: closed connection, timeout
            return _error(f"The outcome is unknown ({type(lost).__name__}); do not retry it.")
        result = _without_own_meta(types.CallToolResult.model_validate(value))
        meta = dict(result.meta or {})
        meta[RECEIPT_META] = receipt.receipt_id
        return result.model_copy(update={"meta": meta})


def _without_own_meta(result: types.CallToolResult) -> types.CallToolResult:
    """``result`` without ``_meta`` keys in ctrlrun's namespace (``ctrlrun/``): only the
    gateway writes those (a receipt id, a request to approve); an upstream's own would make a
    committed call look like one waiting for a person."""
    meta = result.meta
    if not meta or not any(str(key).startswith(META_NAMESPACE) for key in meta):
        return result
    kept = {k: v for k, v in meta.items() if not str(k).startswith(META_NAMESPACE)}
    return result.model_copy(update={"meta": kept or None})


def _offers_url_elicitation(ctx: Any) -> bool:
    """Did this client declare URL-mode elicitation (2025-11-25 and later)?"""
    capabilities = getattr(getattr(ctx, "session", None), "client_capabilities", None)
    elicitation = getattr(capabilities, "elicitation", None)
    return getattr(elicitation, "url", None) is not None


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _text(result: types.CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content).strip()


Handler = Callable[[Any, types.CallToolRequestParams], Awaitable[Any]]


def guard_call_tool(
    handler: Handler,
    control: ctrlrun.Control,
    *,
    alias: str,
    principal: ctrlrun.Principal | None,
    not_executed_on_error: Iterable[str] = (),
) -> Handler:
    """Middleware for an MCP server you own: ``handler`` (a low-level ``on_call_tool``) with
    every call going through ctrlrun first, as the gateway does for an upstream server. Pass
    the result as the ``Server``'s ``on_call_tool``; filter ``on_list_tools`` yourself with
    ``policy.entry(f"mcp.{alias}.{tool}")`` if the model must not see unnamed tools."""
    gateway = Gateway(
        control,
        None,  # type: ignore[arg-type]  # every call goes through ``via``
        alias=alias,
        principal=principal,
        not_executed_on_error=not_executed_on_error,
    )

    async def guarded(ctx: Any, params: types.CallToolRequestParams) -> Any:
        async def own(tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
            request = types.CallToolRequestParams(name=tool, arguments=arguments)
            result = await handler(ctx, request)
            return types.CallToolResult.model_validate(result)

        return await gateway.call(params.name, dict(params.arguments or {}), via=own)

    return guarded
