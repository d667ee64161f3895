"""Documents in the console: a listing, a create form, and an editor page whose script
(``static/documents.js``) runs the DocumentSession protocol in the browser against the
documents API, served here under ``/api/documents`` for the signed-in person.

The API is the one ``ctrlrun serve`` answers (``ctrlrun.documents.server``), behind two checks
of its own: a request that changes anything carries the session's CSRF token in
``X-Ctrlrun-Csrf``, and the writer recorded in a document's history is the signed-in person,
named by the console, with the browser tab's id after it (``ada (tab k3x9)``); what the
browser sends as ``X-Ctrlrun-Writer`` is only the tab id.
"""

from __future__ import annotations

import hmac
import json
import re
from typing import Any, Final

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ctrlrun.console.auth import Gate, Person
from ctrlrun.console.render import page
from ctrlrun.documents.merge import MERGES
from ctrlrun.documents.server import ATTESTED_WRITER
from ctrlrun.documents.server import create_app as documents_api
from ctrlrun.documents.store import DocumentStore
from ctrlrun.documents.wire import API_PREFIX, WRITER_HEADER
from ctrlrun.errors import CtrlrunError, InvalidArgument
from ctrlrun.kernel.document import DEFAULT_KIND, check_doc_id, check_kind, check_writer

CSRF_HEADER: Final = "x-ctrlrun-csrf"
_TAB: Final = re.compile(r"[a-z0-9]{1,16}")
_SAFE_METHODS: Final = frozenset({"GET", "HEAD"})


class ConsoleDocumentsApi:
    """ASGI: the documents API as the signed-in person (``scope["console.person"]``, set by
    the console's ``SignedIn``). Refuses with 403 a changing request without the session's
    CSRF token, with 400 a tab id that is not 1-16 of ``[a-z0-9]``; otherwise passes the
    request on with the person and the tab as the attested writer (``ATTESTED_WRITER``: text in
    the scope, so a name outside Latin-1 is recorded as it is)."""

    def __init__(self, api: ASGIApp) -> None:
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        person: Person = scope["console.person"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = _refusal(scope["method"], headers, person)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        tab = headers.get(WRITER_HEADER.lower(), "")
        writer = f"{person.name} (tab {tab})" if tab else person.name
        await self.api({**scope, ATTESTED_WRITER: writer}, receive, send)


def _refusal(method: str, headers: dict[str, str], person: Person) -> Response | None:
    if method not in _SAFE_METHODS:
        token = headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(token.encode(), person.csrf.encode()):
            body = {"error": "csrf", "message": "the request does not carry this session's token"}
            return JSONResponse(body, status_code=403)
    tab = headers.get(WRITER_HEADER.lower(), "")
    try:
        if tab and not _TAB.fullmatch(tab):
            raise InvalidArgument(f"a tab id is 1-16 of [a-z0-9], not {tab!r}")
        check_writer(f"{person.name} (tab {tab})")
    except InvalidArgument as exc:
        return JSONResponse({"error": "invalid_argument", "message": exc.message}, 400)
    return None


def routes(store: Any, gate: Gate) -> list[Route]:
    """The documents pages and the documents API over ``store``."""
    documents = DocumentStore(store)
    api = ConsoleDocumentsApi(documents_api(documents))

    async def listing(request: Request) -> Response:
        found = await run_in_threadpool(documents.list)
        return page(request, "documents.html", documents=found, kinds=_kinds(), failed="")

    async def create(request: Request) -> Response:
        person, form = await gate.checked_form(request)
        try:
            doc_id = check_doc_id(str(form.get("doc_id", "")).strip())
            kind = check_kind(str(form.get("kind", DEFAULT_KIND)))
            content = _json(str(form.get("content", "")))
            await run_in_threadpool(
                lambda: documents.create(doc_id, content, kind=kind, writer=person.name)
            )
        except CtrlrunError as exc:
            found = await run_in_threadpool(documents.list)
            return page(
                request, "documents.html", 400, documents=found, kinds=_kinds(), failed=exc.message
            )
        return RedirectResponse(f"/documents/{doc_id}", status_code=303)

    async def editor(request: Request) -> Response:
        try:
            doc_id = check_doc_id(request.path_params["doc_id"])
        except InvalidArgument as exc:
            return page(request, "refused.html", 404, message=exc.message)
        return page(request, "document.html", doc_id=doc_id, merges=sorted(MERGES))

    return [
        Route("/documents", listing),
        Route("/documents", create, methods=["POST"]),
        Route("/documents/{doc_id}", editor),
        Route(API_PREFIX, api, methods=["GET", "POST"]),
        Route(API_PREFIX + "/{rest:path}", api, methods=["GET", "PUT"]),
    ]


def _kinds() -> list[str]:
    return [DEFAULT_KIND, *sorted(MERGES)]


def _json(text: str) -> Any:
    try:
        return json.loads(text or "{}")
    except ValueError as exc:
        raise InvalidArgument(f"the content is not JSON: {exc}") from None
