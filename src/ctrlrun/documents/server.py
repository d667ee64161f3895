"""The documents HTTP API (extra ``ctrlrun[server]``: Starlette; ``ctrlrun serve`` runs it).

``create_app(documents)`` answers:

* ``POST /api/documents`` ``{"id", "content", "kind"?}`` → 201 and the document (409
  ``document_exists`` if the id is taken);
* ``GET /api/documents/{id}`` → 200 ``{"id", "kind", "version", "content", "contentHash",
  "createdAt", "updatedAt", "updatedBy"}`` with ``ETag: "<version>"``;
* ``PUT /api/documents/{id}`` ``{"content", "expectedVersion"?}`` (or ``If-Match: "<n>"``) → 200
  ``{"id", "version", "contentHash"}``; 409 ``version_conflict`` with ``currentVersion``; 428
  without an expected version;
* ``GET /api/documents/{id}/history`` → ``{"id", "versions": [{"version", "contentHash",
  "writer", "savedAt"}]}``.

404 for an unknown id, 413 over the size limit (the ``Content-Length`` header and the bytes that
actually arrive are both checked), 415 for a body that is not ``application/json``, 400 for
malformed JSON, wrong types or floats, or a ``Content-Length`` that is not ASCII digits, 408 for
a body that does not arrive within ``body_timeout``, 503 when the store fails. Bad input never
makes a 500.
``X-Ctrlrun-Writer`` names the writer recorded in the history: an assertion by the caller, not
authentication.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, Final

try:
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
except ModuleNotFoundError as exc:  # pragma: no cover - exercised by the architecture test
    from ctrlrun.errors import MissingDependency

    raise MissingDependency(module=(exc.name or "starlette").split(".")[0], extra="server") from exc

from ctrlrun.canonical import digest
from ctrlrun.documents.store import DocumentStore
from ctrlrun.documents.wire import (
    API_PREFIX,
    WRITER_HEADER,
    decode_json,
    document_to_wire,
    etag,
    parse_create,
    parse_save,
    problem_for,
    version_to_wire,
)
from ctrlrun.errors import CtrlrunError, DocumentTooLarge, InvalidArgument
from ctrlrun.kernel.document import check_doc_id, check_writer

ENVELOPE_BYTES: Final = 64 * 1024
"""Room a request body may take beyond the content limit (keys, id, escaping)."""
DEFAULT_BODY_TIMEOUT: Final = 30.0
ATTESTED_WRITER: Final = "ctrlrun.writer"
"""The ASGI scope key under which an app in front of this one names the writer it
authenticated; it wins over the ``X-Ctrlrun-Writer`` header (text, so any name survives)."""
_BYTE_COUNT: Final = re.compile(r"[0-9]{1,18}")  # ASCII digits only: str.isdigit takes '١٢' too

Handler = Callable[[Request], Awaitable[Response]]


def create_app(
    documents: DocumentStore,
    *,
    max_body_bytes: int | None = None,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
) -> Starlette:
    """The ASGI app over ``documents``. A body over ``max_body_bytes`` (default: the store's
    content limit plus ``ENVELOPE_BYTES``) is refused with 413 before it is parsed; one that
    has not arrived whole within ``body_timeout`` seconds, with 408."""
    limit = max_body_bytes or documents.max_content_bytes + ENVELOPE_BYTES
    api = _Api(documents, limit, body_timeout)
    return Starlette(
        routes=[
            Route(API_PREFIX, _guard(api.create), methods=["POST"]),
            Route(API_PREFIX + "/{doc_id}", _guard(api.get), methods=["GET"]),
            Route(API_PREFIX + "/{doc_id}", _guard(api.save), methods=["PUT"]),
            Route(API_PREFIX + "/{doc_id}/history", _guard(api.history), methods=["GET"]),
        ]
    )


def _guard(handler: Handler) -> Handler:
    """Turn every ctrlrun refusal or fault into its status and body (``problem_for``)."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except CtrlrunError as exc:
            problem = problem_for(exc)
            return JSONResponse(problem.body, status_code=problem.status)
        except TimeoutError:
            body = {"error": "request_timeout", "message": "the request body came too slowly"}
            return JSONResponse(body, status_code=408, headers={"Connection": "close"})
        except ClientDisconnect:  # nobody is left to answer
            return Response(status_code=400)

    return guarded


class _Api:
    def __init__(self, documents: DocumentStore, limit: int, body_timeout: float) -> None:
        self.documents, self.limit, self.body_timeout = documents, limit, body_timeout

    async def create(self, request: Request) -> Response:
        doc_id, kind, content = parse_create(await self._body(request))
        writer = _writer(request)
        doc = await run_in_threadpool(
            self.documents.create, doc_id, content, kind=kind, writer=writer
        )
        return JSONResponse(
            document_to_wire(doc),
            status_code=201,
            headers={"ETag": etag(doc.version), "Location": f"{API_PREFIX}/{doc.doc_id}"},
        )

    async def get(self, request: Request) -> Response:
        doc_id = check_doc_id(request.path_params["doc_id"])
        doc = await run_in_threadpool(self.documents.get, doc_id)
        return JSONResponse(document_to_wire(doc), headers={"ETag": etag(doc.version)})

    async def save(self, request: Request) -> Response:
        doc_id = check_doc_id(request.path_params["doc_id"])
        content, expected = parse_save(await self._body(request), request.headers.get("if-match"))
        version = await run_in_threadpool(
            self.documents.save,
            doc_id,
            content,
            expected_version=expected,
            writer=_writer(request),
        )
        answer = {"id": doc_id, "version": version, "contentHash": digest(content)}
        return JSONResponse(answer, headers={"ETag": etag(version)})

    async def history(self, request: Request) -> Response:
        doc_id = check_doc_id(request.path_params["doc_id"])
        versions = await run_in_threadpool(self.documents.history, doc_id)
        return JSONResponse({"id": doc_id, "versions": [version_to_wire(v) for v in versions]})

    async def _body(self, request: Request) -> Any:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise InvalidArgument(
                f"the body must be application/json, not {media or 'unlabelled'}",
                code="unsupported_media_type",
            )
        declared = request.headers.get("content-length")
        if declared is not None:
            if not _BYTE_COUNT.fullmatch(declared):
                raise InvalidArgument(f"Content-Length {declared!r} is not a byte count")
            self._check_size(int(declared))
        async with asyncio.timeout(self.body_timeout):
            raw = await self._read(request)
        return decode_json(raw)

    async def _read(self, request: Request) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():  # the bytes that arrive, whatever was declared
            size += len(chunk)
            self._check_size(size)
            chunks.append(chunk)
        return b"".join(chunks)

    def _check_size(self, size: int) -> None:
        if size > self.limit:
            raise DocumentTooLarge(
                f"the request body is over the limit of {self.limit} bytes",
                size=size,
                limit=self.limit,
            )


def _writer(request: Request) -> str | None:
    """The writer an app in front of this one attested (``scope["ctrlrun.writer"]``: the
    console's signed-in person), else what ``X-Ctrlrun-Writer`` asserts."""
    attested = request.scope.get(ATTESTED_WRITER)
    if attested is not None:
        return check_writer(attested)
    return check_writer(request.headers.get(WRITER_HEADER))
