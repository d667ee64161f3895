"""Clients of the documents API: over HTTP (standard library ``urllib`` only), or in-process.

Both raise the same exceptions: ``VersionConflict``, ``DocumentNotFound``, ``DocumentExists``,
``InvalidArgument`` (and its ``DocumentTooLarge``, ``PreconditionRequired``) for answers the
server gave, and ``Unreachable`` (a ``StoreError``) when there is no usable answer: refused or
lost connections, timeouts, 5xx, garbled replies. After ``Unreachable`` a save's outcome is
unknown; it may have landed.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar
from urllib.parse import quote

from ctrlrun.canonical import canonical_bytes
from ctrlrun.documents.store import DocumentStore
from ctrlrun.documents.wire import (
    API_PREFIX,
    WRITER_HEADER,
    decode_json,
    document_from_wire,
    error_from_problem,
    version_from_wire,
)
from ctrlrun.errors import InvalidArgument, Unreachable
from ctrlrun.kernel.document import (
    DEFAULT_KIND,
    Document,
    DocumentVersion,
    check_doc_id,
    check_token,
    check_version,
)

MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
T = TypeVar("T")


class DocumentClient(Protocol):
    """What a ``DocumentSession`` needs from the authoritative side."""

    user: str
    """Who this client says it is (a plain token); the session records ``user/writer_id``."""

    def fetch(self, doc_id: str) -> Document:
        """The latest version."""
        ...

    def save(
        self, doc_id: str, content: Any, *, expected_version: int, writer: str | None = None
    ) -> int:
        """Compare-and-swap; the version the document is at afterwards."""
        ...


class LocalDocumentClient:
    """A ``DocumentClient`` over a ``DocumentStore`` in this process (no HTTP)."""

    def __init__(self, documents: DocumentStore, *, user: str) -> None:
        self.documents = documents
        self.user = check_token(user, "user")

    def fetch(self, doc_id: str) -> Document:
        """See ``DocumentStore.get``."""
        return self.documents.get(doc_id)

    def save(
        self, doc_id: str, content: Any, *, expected_version: int, writer: str | None = None
    ) -> int:
        """See ``DocumentStore.save``; ``writer`` defaults to ``user``."""
        return self.documents.save(
            doc_id, content, expected_version=expected_version, writer=writer or self.user
        )


class HttpDocumentClient:
    """A ``DocumentClient`` for ``ctrlrun serve`` at ``base_url`` (``http://127.0.0.1:8737``).

    Requests go straight to the server (no proxy from the environment) and time out after
    ``timeout`` seconds. ``X-Ctrlrun-Writer`` carries the writer: an assertion, not a login.
    """

    def __init__(self, base_url: str, *, user: str, timeout: float = 10.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise InvalidArgument(f"base_url must be http(s)://…, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.user = check_token(user, "user")
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def fetch(self, doc_id: str) -> Document:
        """``GET /api/documents/{id}``."""
        data = self._call("GET", check_doc_id(doc_id))
        return _parsed(document_from_wire, data, self._url(doc_id))

    def create(
        self, doc_id: str, content: Any, *, kind: str = DEFAULT_KIND, writer: str | None = None
    ) -> Document:
        """``POST /api/documents``: version 1 of a new document."""
        body = {"id": check_doc_id(doc_id), "kind": kind, "content": content}
        data = self._call("POST", doc_id, body=body, writer=writer, path=API_PREFIX)
        return _parsed(document_from_wire, data, self._url(doc_id))

    def save(
        self, doc_id: str, content: Any, *, expected_version: int, writer: str | None = None
    ) -> int:
        """``PUT /api/documents/{id}`` with ``expectedVersion``."""
        body = {"content": content, "expectedVersion": check_version(expected_version)}
        data = self._call("PUT", check_doc_id(doc_id), body=body, writer=writer)
        return _parsed(lambda d: check_version(d["version"], "version"), data, self._url(doc_id))

    def history(self, doc_id: str) -> tuple[DocumentVersion, ...]:
        """``GET /api/documents/{id}/history``, oldest first."""
        path = f"{API_PREFIX}/{quote(check_doc_id(doc_id))}/history"
        data = self._call("GET", doc_id, path=path)
        return _parsed(
            lambda d: tuple(version_from_wire(v) for v in d["versions"]), data, self._url(doc_id)
        )

    def _url(self, doc_id: str) -> str:
        return f"{self.base_url}{API_PREFIX}/{quote(doc_id)}"

    def _call(
        self,
        method: str,
        doc_id: str,
        *,
        body: Any = None,
        writer: str | None = None,
        path: str | None = None,
    ) -> Any:
        url = self.base_url + path if path else self._url(doc_id)
        headers = {"Accept": "application/json", WRITER_HEADER: writer or self.user}
        data = None
        if body is not None:
            data = canonical_bytes(body)  # refuses floats here, before anything is sent
            headers["Content-Type"] = "application/json"
        # the scheme was checked to be http(s) in __init__
        request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return decode_json(response.read(MAX_RESPONSE_BYTES))
        except urllib.error.HTTPError as exc:
            raise error_from_problem(exc.code, _problem_body(exc), url=url, doc_id=doc_id) from None
        except InvalidArgument as exc:  # a 2xx whose body is not JSON: no usable answer
            raise Unreachable(f"{url}: unreadable answer: {exc}", url=url) from None
        except (OSError, http.client.HTTPException) as exc:  # URLError, resets, timeouts
            raise Unreachable(f"{url}: {type(exc).__name__}: {exc}", url=url) from None


def _problem_body(exc: urllib.error.HTTPError) -> Any:
    try:
        return decode_json(exc.read(MAX_RESPONSE_BYTES))
    except (InvalidArgument, OSError, http.client.HTTPException):
        return None
    finally:
        exc.close()


def _parsed(parse: Callable[[Any], T], data: Any, url: str) -> T:
    """``parse(data)``, or ``Unreachable`` if a 2xx answer does not have the promised shape."""
    try:
        return parse(data)
    except (InvalidArgument, KeyError, TypeError, ValueError) as exc:
        raise Unreachable(f"{url}: unexpected answer: {exc!r:.200}", url=url) from None
