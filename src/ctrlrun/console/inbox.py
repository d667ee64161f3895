"""The approvals inbox: what waits for a person, newest first, with grant and deny.

Each request shows the exact action (every argument, escaped, and the hash a grant binds to),
who asked, the rule and controls, expiry and M-of-N progress. A grant posts back the hash the
person saw and is refused unless the request still holds that action. ``/inbox/pending.json``
lists the waiting ids for the page's polling script (live updates).
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ctrlrun._time import utc_now
from ctrlrun.console.approvals_source import InboxSource
from ctrlrun.console.auth import Gate
from ctrlrun.console.render import SECURITY_HEADERS, done_notice, page
from ctrlrun.errors import CtrlrunError


def routes(source: InboxSource, gate: Gate) -> list[Route]:
    """The inbox's routes over ``source``."""

    async def inbox(request: Request) -> Response:
        pending, tampered = await run_in_threadpool(source.listing)
        return page(
            request,
            "inbox.html",
            pending=pending,
            tampered=tampered,
            now=utc_now(),
            done=done_notice(request),
        )

    async def pending_ids(request: Request) -> Response:
        pending = await run_in_threadpool(source.pending)
        return JSONResponse({"pending": [p.id for p in pending]}, headers=SECURITY_HEADERS)

    async def grant(request: Request) -> Response:
        person, form = await gate.checked_form(request)
        approval_id = request.path_params["approval_id"]
        action_hash = str(form.get("action_hash", ""))
        reason = str(form.get("reason", "")).strip() or None  # optional for a grant
        return await _answer(
            request, "granted", source.grant, approval_id, person.name, action_hash, reason
        )

    async def deny(request: Request) -> Response:
        person, form = await gate.checked_form(request)
        approval_id = request.path_params["approval_id"]
        reason = str(form.get("reason", "")).strip()
        if not reason:
            return page(request, "refused.html", 400, message="a denial needs a reason")
        return await _answer(request, "denied", source.deny, approval_id, person.name, reason)

    return [
        Route("/", inbox),
        Route("/inbox/pending.json", pending_ids),
        Route("/approvals/{approval_id}/grant", grant, methods=["POST"]),
        Route("/approvals/{approval_id}/deny", deny, methods=["POST"]),
    ]


async def _answer(request: Request, verb: str, call: Any, *args: str | None) -> Response:
    """Run one answer; a refusal is shown (nothing written), success redirects to the inbox."""
    try:
        answered = await run_in_threadpool(call, *args)
    except CtrlrunError as exc:
        return page(request, "refused.html", 409, message=exc.message)
    return RedirectResponse(f"/?done={verb}+{answered.id}", status_code=303)
