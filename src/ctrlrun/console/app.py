"""The console app: sign-in, then one page per module, every response through the guards.

``create_app(store, gate)`` returns the Starlette app; ``ctrlrun console`` wraps it in
``HostGuard`` (loopback Host/Origin checks) and serves it with ``ctrlrun.serving``.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any, Final

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ctrlrun.console import documents, durable, effects, inbox, receipts, stats
from ctrlrun.console.approvals_source import InboxSource
from ctrlrun.console.auth import COOKIE, SESSION_TTL, Gate
from ctrlrun.console.render import SECURITY_HEADERS, page
from ctrlrun.kernel.policy import Policy

STATIC: Final = {
    "console.js": "text/javascript",
    "documents.js": "text/javascript",
    "console.css": "text/css",
}
OPEN_PATHS: Final = frozenset({"/sign-in", *(f"/static/{name}" for name in STATIC)})


class SignedIn:
    """ASGI middleware: every path but the sign-in page and the static files needs a signed-in
    person (put in ``scope["console.person"]``); a page request without one is sent to sign
    in, anything else is answered 403."""

    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app, self.gate = app, gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        person = self.gate.person(Request(scope))
        if person is None:
            refusal: Response
            path = scope["path"]
            page_request = not (path.endswith(".json") or path.startswith("/api/"))
            if scope["method"] == "GET" and page_request:
                refusal = RedirectResponse("/sign-in", status_code=303)
            else:
                refusal = PlainTextResponse("sign in first", 403)
            await refusal(scope, receive, send)
            return
        scope["console.person"] = person
        await self.app(scope, receive, send)


def _sign_in_routes(gate: Gate) -> list[Route]:
    async def form(request: Request) -> Response:
        return page(request, "sign_in.html", failed=False, wait=None, proxy=gate.trusted_header)

    async def submit(request: Request) -> Response:
        posted = await request.form()
        name, password = str(posted.get("name", "")), str(posted.get("password", ""))
        address = request.client.host if request.client else None
        wait = gate.throttle.wait(name, address)
        if wait is not None:  # refused before the password is looked at
            refused = page(
                request, "sign_in.html", 429, failed=False, wait=wait, proxy=gate.trusted_header
            )
            refused.headers["Retry-After"] = str(wait)
            return refused
        sid = await run_in_threadpool(gate.sign_in, name, password, address)
        if sid is None:
            return page(
                request, "sign_in.html", 401, failed=True, wait=None, proxy=gate.trusted_header
            )
        done = RedirectResponse("/", status_code=303)
        done.set_cookie(
            COOKIE,
            sid,
            max_age=int(SESSION_TTL.total_seconds()),
            path="/",
            secure=gate.secure_cookie,
            httponly=True,
            samesite="strict",
        )
        return done

    async def sign_out(request: Request) -> Response:
        await gate.checked_form(request)
        gate.sign_out(request)
        done = RedirectResponse("/sign-in", status_code=303)
        done.delete_cookie(COOKIE, path="/")
        return done

    return [
        Route("/sign-in", form, methods=["GET"]),
        Route("/sign-in", submit, methods=["POST"]),
        Route("/sign-out", sign_out, methods=["POST"]),
    ]


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return PlainTextResponse("not found", 404)
    body = resources.files("ctrlrun.console").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name], headers=SECURITY_HEADERS)


def create_app(
    store: Any,
    gate: Gate,
    signing_key: bytes | None = None,
    approver_keys: Mapping[str, str] | None = None,
    policy: Policy | None = None,
) -> ASGIApp:
    """The console over ``store``; who may use it is ``gate``'s to say; its answers are signed
    with ``signing_key`` when given, and must be when ``approver_keys`` (the policy's
    ``approvers``) names any; ``policy`` (when given) says how arguments are shown and what
    each rule says."""
    routes = [
        *_sign_in_routes(gate),
        Route("/static/{name}", static),
        *inbox.routes(InboxSource(store, signing_key, approver_keys, policy), gate),
        *effects.routes(store, gate, policy),
        *receipts.routes(store),
        *stats.routes(store),
        *durable.routes(store, gate),
        *documents.routes(store, gate),
    ]
    return SignedIn(Starlette(routes=routes), gate)
