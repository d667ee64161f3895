"""Versioned documents: the model and the compare-and-swap planner. Pure: no I/O.

A document is a JSON value stored as its canonical form (``ctrlrun.canonical``: sorted keys, no
whitespace, floats refused) under an id, with a ``kind`` naming how it may be merged and a
``version`` that starts at 1 and grows by one per saved change. ``plan_save`` decides every
save; stores call it and then only write, with one conditional update on the version.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from ctrlrun.canonical import MAX_DEPTH as CANONICAL_MAX_DEPTH
from ctrlrun.canonical import canonical_bytes, sha256_hex
from ctrlrun.errors import DocumentNotFound, DocumentTooLarge, InvalidArgument, VersionConflict

# Ids travel in URL paths and name draft files, so they are plain tokens: no "/", no "~"
# (drafts set aside are named "<writer>~<tag>"), no leading dot, no whitespace.
_TOKEN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
_WRITER_MAX: Final = 200
DEFAULT_KIND: Final = "json"
DEFAULT_MAX_CONTENT_BYTES: Final = 1024 * 1024
MAX_DEPTH: Final = CANONICAL_MAX_DEPTH
"""Deepest nesting of arrays and objects a document may have (the top-level container is level
1): bounded so that no layer (the canonical walk, a JSON encoder) can run out of stack on
hostile input. The canonical form's own limit, so that every content that passes this check
has a canonical text and hash (it said 100 once, and content 33 deep was refused anyway)."""


def _check_token(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        raise InvalidArgument(
            f"{what} must be 1-128 characters of letters, digits and '._@-', starting with a"
            f" letter or digit; got {value!r}",
            what=what,
        )
    return value


def check_doc_id(value: Any) -> str:
    """``value`` if it is a valid document id; ``InvalidArgument`` otherwise."""
    return _check_token(value, "document id")


def check_kind(value: Any) -> str:
    """``value`` if it is a valid kind name; ``InvalidArgument`` otherwise."""
    return _check_token(value, "document kind")


def check_token(value: Any, what: str) -> str:
    """``value`` if it is a plain token (the rule for ids, users and writer ids)."""
    return _check_token(value, what)


def check_writer(value: Any) -> str | None:
    """A writer identity as recorded in the history: None, or printable text up to 200 chars.

    It is an assertion by the caller, not an authenticated principal.
    """
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value
        or len(value) > _WRITER_MAX
        or not value.isprintable()
        or value != value.strip()
    ):
        raise InvalidArgument(
            f"a writer is printable text of 1-{_WRITER_MAX} characters without surrounding"
            f" spaces; got {value!r}",
            what="writer",
        )
    return value


@dataclass(frozen=True, slots=True)
class Content:
    """A JSON value with its canonical text and ``sha256:`` digest, validated once."""

    value: Any
    text: str
    hash: str

    @classmethod
    def of(cls, value: Any, *, limit: int = DEFAULT_MAX_CONTENT_BYTES) -> Content:
        """Canonicalise ``value``; ``InvalidArgument`` if it has no canonical form (floats
        included) or nests deeper than ``MAX_DEPTH``, ``DocumentTooLarge`` if its canonical
        bytes exceed ``limit``."""
        _check_depth(value)
        data = canonical_bytes(value)
        if len(data) > limit:
            raise DocumentTooLarge(
                f"document content is {len(data)} bytes; the limit is {limit}",
                size=len(data),
                limit=limit,
            )
        return cls(value, data.decode("utf-8"), sha256_hex(data))


@dataclass(frozen=True, slots=True)
class Document:
    """A document as stored: the latest version and who saved it when."""

    doc_id: str
    kind: str
    version: int
    content: Any
    content_hash: str
    created_at: datetime
    updated_at: datetime
    updated_by: str | None

    def __iter__(self) -> Iterator[Any]:
        """Unpacks as ``(content, version)``: the pair a later ``save`` is based on."""
        return iter((self.content, self.version))


@dataclass(frozen=True, slots=True)
class DocumentVersion:
    """One saved version in a document's history: who, when, and the content's digest."""

    version: int
    content_hash: str
    writer: str | None
    saved_at: datetime


@dataclass(frozen=True, slots=True)
class DocumentSummary:
    """A document in a listing: everything but its content."""

    doc_id: str
    kind: str
    version: int
    updated_at: datetime
    updated_by: str | None


@dataclass(frozen=True, slots=True)
class Stored:
    """What ``plan_save`` needs to know about the stored row."""

    version: int
    content_hash: str


class SaveKind(StrEnum):
    """What a save comes to."""

    NOOP = "noop"
    WRITE = "write"


@dataclass(frozen=True, slots=True)
class SavePlan:
    """``NOOP``: answer ``version`` (the stored one), write nothing. ``WRITE``: move the row
    from ``expected_version`` to ``version`` (= expected + 1) with one conditional update."""

    kind: SaveKind
    version: int
    expected_version: int


def _check_depth(value: Any) -> None:
    """Iterative, so that the check itself cannot overflow the stack it protects."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, Mapping | list | tuple):
            continue
        if depth > MAX_DEPTH:
            raise InvalidArgument(f"document content nests deeper than {MAX_DEPTH} levels")
        children = item.values() if isinstance(item, Mapping) else item
        stack.extend((child, depth + 1) for child in children)


def check_version(value: Any, what: str = "expected version") -> int:
    """``value`` if it is an ``int`` (not a bool) of at least 1; ``InvalidArgument`` otherwise."""
    if type(value) is not int or value < 1:
        raise InvalidArgument(f"{what} must be an integer >= 1, got {value!r}", what=what)
    return value


def plan_save(
    current: Stored | None, content: Content, expected_version: int, *, doc_id: str
) -> SavePlan:
    """Decide a compare-and-swap save of ``content`` based on ``expected_version``.

    * no stored row: ``DocumentNotFound``;
    * the stored content already is ``content``: ``NOOP`` answering the stored version,
      whatever version the save was based on. Nothing is overwritten, and a save retried after
      its reply was lost is answered as the success it was rather than as a conflict with itself;
    * the stored version is ``expected_version``: ``WRITE`` version + 1;
    * otherwise ``VersionConflict(current_version)``: a save never replaces a version it was
      not based on.
    """
    expected = check_version(expected_version)
    if current is None:
        raise DocumentNotFound(f"no document {doc_id!r}", doc_id=doc_id)
    if current.content_hash == content.hash:
        return SavePlan(SaveKind.NOOP, current.version, expected)
    if current.version != expected:
        raise VersionConflict(
            f"document {doc_id!r} is at version {current.version}; the save was based on"
            f" version {expected}",
            doc_id=doc_id,
            current_version=current.version,
            expected_version=expected,
        )
    return SavePlan(SaveKind.WRITE, expected + 1, expected)
