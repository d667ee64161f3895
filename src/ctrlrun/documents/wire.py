"""The documents HTTP API's wire format, shared by the server and the client (no HTTP library).

Bodies are JSON objects with closed key sets and camelCase names. Errors are
``{"error": <code>, "message": <text>, …}`` with a status per refusal (``problem_for``), and the
client turns them back into the same exceptions (``error_from_problem``). Decoding is strict:
UTF-8 only, duplicate keys refused, no NaN/Infinity; floats are refused by canonicalisation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

from ctrlrun._time import decode_instant, encode_instant
from ctrlrun.errors import (
    CtrlrunError,
    DocumentExists,
    DocumentNotFound,
    DocumentTooLarge,
    InvalidArgument,
    PreconditionRequired,
    StoreError,
    Unreachable,
    VersionConflict,
)
from ctrlrun.kernel.document import (
    DEFAULT_KIND,
    Document,
    DocumentVersion,
    check_doc_id,
    check_kind,
    check_version,
)

API_PREFIX: Final = "/api/documents"
WRITER_HEADER: Final = "X-Ctrlrun-Writer"
_ETAG: Final = re.compile(r'"([1-9][0-9]{0,17})"')


def _refuse_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_json(raw: bytes) -> Any:
    """``raw`` as JSON; ``InvalidArgument(code="invalid_json")`` for anything malformed."""
    try:
        return json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_refuse_pairs,
            parse_constant=_refuse_constant,
        )
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, digits
        raise InvalidArgument(f"the body is not valid JSON: {exc}", code="invalid_json") from None


def _object(body: Any, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidArgument("the body must be a JSON object")
    missing, unknown = required - body.keys(), body.keys() - required - optional
    if missing or unknown:
        raise InvalidArgument(
            f"the body needs {sorted(required)} and may have {sorted(optional)};"
            f" missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    return body


def etag(version: int) -> str:
    """The strong ETag of ``version``: the version number, quoted."""
    return f'"{version}"'


def parse_if_match(value: str | None) -> int | None:
    """The version an ``If-Match`` header names; ``*``, weak and list forms are refused
    (a save must name exactly the version it was based on)."""
    if value is None:
        return None
    match = _ETAG.fullmatch(value.strip())
    if match is None:
        if value.strip() == "*":
            raise PreconditionRequired("If-Match: * would overwrite any version; name one")
        raise InvalidArgument(f"If-Match must be one quoted version like '\"3\"', got {value!r}")
    return int(match.group(1))


def parse_save(body: Any, if_match: str | None) -> tuple[Any, int]:
    """``(content, expected_version)`` from a PUT body and its ``If-Match`` header."""
    fields = _object(body, {"content"}, {"expectedVersion"})
    from_header = parse_if_match(if_match)
    from_body = fields.get("expectedVersion")
    if from_body is not None:
        check_version(from_body, "expectedVersion")
    if from_body is None and from_header is None:
        raise PreconditionRequired("send expectedVersion (or If-Match): saves compare and swap")
    if from_body is not None and from_header is not None and from_body != from_header:
        raise InvalidArgument(f"expectedVersion {from_body} and If-Match {if_match} disagree")
    expected = from_body if from_body is not None else from_header
    assert expected is not None
    return fields["content"], expected


def parse_create(body: Any) -> tuple[str, str, Any]:
    """``(doc_id, kind, content)`` from a POST body."""
    fields = _object(body, {"id", "content"}, {"kind"})
    kind = fields.get("kind", DEFAULT_KIND)
    return check_doc_id(fields["id"]), check_kind(kind), fields["content"]


def document_to_wire(doc: Document) -> dict[str, Any]:
    """The GET body of ``doc``."""
    return {
        "id": doc.doc_id,
        "kind": doc.kind,
        "version": doc.version,
        "content": doc.content,
        "contentHash": doc.content_hash,
        "createdAt": encode_instant(doc.created_at),
        "updatedAt": encode_instant(doc.updated_at),
        "updatedBy": doc.updated_by,
    }


def document_from_wire(data: Any) -> Document:
    """Inverse of ``document_to_wire``; ``ValueError``/``KeyError``/``TypeError`` if malformed."""
    return Document(
        doc_id=check_doc_id(data["id"]),
        kind=check_kind(data["kind"]),
        version=check_version(data["version"], "version"),
        content=data["content"],
        content_hash=str(data["contentHash"]),
        created_at=decode_instant(data["createdAt"]),
        updated_at=decode_instant(data["updatedAt"]),
        updated_by=data["updatedBy"],
    )


def version_to_wire(entry: DocumentVersion) -> dict[str, Any]:
    """One history entry."""
    return {
        "version": entry.version,
        "contentHash": entry.content_hash,
        "writer": entry.writer,
        "savedAt": encode_instant(entry.saved_at),
    }


def version_from_wire(data: Any) -> DocumentVersion:
    """Inverse of ``version_to_wire``."""
    return DocumentVersion(
        version=check_version(data["version"], "version"),
        content_hash=str(data["contentHash"]),
        writer=data["writer"],
        saved_at=decode_instant(data["savedAt"]),
    )


@dataclass(frozen=True, slots=True)
class Problem:
    """An error response: its status and its JSON body."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


def problem_for(exc: CtrlrunError) -> Problem:
    """The response for a refusal or a fault raised while serving a request."""

    def body(code: str, **extra: Any) -> dict[str, Any]:
        return {"error": code, "message": exc.message, **extra}

    if isinstance(exc, VersionConflict):
        extra = {"currentVersion": exc.current_version, "expectedVersion": exc.expected_version}
        return Problem(409, body("version_conflict", **extra))
    if isinstance(exc, DocumentExists):
        return Problem(409, body("document_exists", currentVersion=exc.current_version))
    if isinstance(exc, DocumentNotFound):
        return Problem(404, body("not_found"))
    if isinstance(exc, DocumentTooLarge):
        return Problem(413, body("payload_too_large", limit=exc.limit))
    if isinstance(exc, PreconditionRequired):
        return Problem(428, body("precondition_required"))
    if isinstance(exc, InvalidArgument):
        code = str(getattr(exc, "code", "invalid_argument"))
        return Problem(415 if code == "unsupported_media_type" else 400, body(code))
    if isinstance(exc, StoreError):
        return Problem(503, body("store_unavailable"))
    raise exc


def error_from_problem(status: int, data: Any, *, url: str, doc_id: str) -> CtrlrunError:
    """The exception a client raises for an error response (inverse of ``problem_for``).

    A 5xx, or a body that is not a problem this API sends, is ``Unreachable``: the outcome is
    unknown.
    """
    code = data.get("error") if isinstance(data, dict) else None
    message = str(data.get("message", code)) if isinstance(data, dict) else f"HTTP {status}"
    try:
        if status == 409 and code == "version_conflict":
            return VersionConflict(
                message,
                doc_id=doc_id,
                current_version=check_version(data["currentVersion"], "currentVersion"),
                expected_version=data.get("expectedVersion"),
            )
        if status == 409 and code == "document_exists":
            current = check_version(data["currentVersion"], "currentVersion")
            return DocumentExists(message, doc_id=doc_id, current_version=current)
        if status == 404 and code == "not_found":
            return DocumentNotFound(message, doc_id=doc_id)
        if status == 413:
            return DocumentTooLarge(message, size=-1, limit=int(data.get("limit", -1)))
        if status == 428:
            return PreconditionRequired(message)
        if 400 <= status < 500 and isinstance(code, str):
            return InvalidArgument(message, code=code, status=status)
    except (InvalidArgument, KeyError, TypeError, ValueError):
        pass
    return Unreachable(f"{url}: HTTP {status}: {message}", url=url, status=status)
