"""Loopback HTTP servers: which ``Host`` and ``Origin`` a request may carry.

A server on 127.0.0.1 is still reachable from a browser: a page on an attacker's domain whose
name is re-pointed at 127.0.0.1 (DNS rebinding) sends requests the browser believes are
same-origin, with the attacker's name in ``Host``. So a loopback server answers only requests
whose ``Host`` names it (its loopback address or ``localhost``, with its port), and refuses any
``Origin`` other than its own. ``host_allowed`` and ``origin_allowed`` are the pure checks;
``HostGuard`` is the same as ASGI middleware, for every loopback server ctrlrun runs (the
documents API now; a console or a gateway later). Standard library only.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

LOCALHOST: Final = "localhost"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address literal (names are not resolved:
    a name could resolve elsewhere tomorrow)."""
    if host.lower() == LOCALHOST:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def served_names(bound_host: str, port: int) -> frozenset[str]:
    """The ``Host`` values that name a server bound to ``bound_host``:``port``: the address
    literal (IPv6 in brackets) and ``localhost``, each with the port, and without it when the
    port is HTTP's default 80."""
    literal = bound_host.strip("[]").lower()
    if ":" in literal:
        literal = f"[{literal}]"
    names = {f"{literal}:{port}", f"{LOCALHOST}:{port}"}
    if port == 80:
        names |= {literal, LOCALHOST}
    return frozenset(names)


def host_allowed(value: str | None, names: frozenset[str] | None) -> bool:
    """Whether a request's ``Host`` header ``value`` is one of ``names`` (compared without case,
    as host names are). ``names`` None accepts any present ``Host`` (a server exposed on
    purpose); a missing ``Host`` is never accepted."""
    if value is None or not value or any(c.isspace() for c in value):
        return False
    return names is None or value.lower() in names


def origin_allowed(origin: str | None, host: str) -> bool:
    """Whether a request's ``Origin`` header may come with ``Host`` ``host`` (already
    allowed): no ``Origin`` (not a browser's cross-origin request), or exactly this server's
    own ``http://`` origin. ``null`` and every other site are refused."""
    return origin is None or origin.lower() == f"http://{host.lower()}"


class HostGuard:
    """ASGI middleware: a request whose ``Host`` is not one of ``names`` (``served_names``;
    None: any) or whose ``Origin`` is foreign is answered ``403`` with a JSON problem
    (``forbidden_host`` / ``forbidden_origin``) and never reaches ``app``; a websocket is
    closed instead. Lifespan and other scopes pass through."""

    def __init__(self, app: App, names: frozenset[str] | None) -> None:
        self.app, self.names = app, names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope.get("headers", []))
        if refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await _problem(send, *refusal)

    def refusal(self, headers: list[tuple[bytes, bytes]]) -> tuple[str, str] | None:
        """Why a request with ``headers`` is refused (code, message), or None."""
        hosts = [v.decode("latin-1") for k, v in headers if k.lower() == b"host"]
        origins = [v.decode("latin-1") for k, v in headers if k.lower() == b"origin"]
        if len(hosts) != 1 or not host_allowed(hosts[0], self.names):
            return "forbidden_host", "this server answers only requests addressed to it by name"
        if len(origins) > 1 or not origin_allowed(origins[0] if origins else None, hosts[0]):
            return "forbidden_origin", "requests from another site are refused"
        return None


async def _problem(send: Send, code: str, message: str) -> None:
    body = json.dumps({"error": code, "message": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": body})
