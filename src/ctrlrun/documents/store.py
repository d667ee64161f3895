"""``DocumentStore``: versioned documents in the same store that records agents' actions.

Every call is one transaction of the underlying ``StateStore`` (``transact`` for writes,
``read`` for reads), so documents work on any backend that ships the ``document_*`` queries and
the documents migration, SQLite today and Postgres by the same SQL.
"""

from __future__ import annotations

from typing import Any

from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.document import (
    DEFAULT_KIND,
    DEFAULT_MAX_CONTENT_BYTES,
    Content,
    Document,
    DocumentSummary,
    DocumentVersion,
    check_doc_id,
    check_kind,
    check_version,
    check_writer,
)
from ctrlrun.store.ops import Txn
from ctrlrun.store.ops.documents import (
    create_document_in_txn,
    get_document_in_txn,
    history_in_txn,
    list_documents_in_txn,
    save_document_in_txn,
)
from ctrlrun.store.protocol import StateStore


class DocumentStore:
    """The authoritative side of versioned documents, over a ``StateStore``.

    Content is any JSON value with a canonical form (floats refused with ``InvalidArgument``),
    at most ``max_content_bytes`` of canonical JSON (``DocumentTooLarge``). Every argument is
    validated before a transaction starts.
    """

    def __init__(
        self, state_store: StateStore, *, max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    ) -> None:
        self.state_store = state_store
        self.max_content_bytes = max_content_bytes

    def _content(self, value: Any) -> Content:
        return Content.of(value, limit=self.max_content_bytes)

    def create(
        self, doc_id: str, content: Any, *, kind: str = DEFAULT_KIND, writer: str | None = None
    ) -> Document:
        """Store ``content`` as version 1 of a new document ``doc_id``.

        ``DocumentExists`` (with the stored version) if the id is taken; nothing is written.
        """
        doc_id, kind, writer = check_doc_id(doc_id), check_kind(kind), check_writer(writer)
        body = self._content(content)

        def work(txn: Txn) -> Document:
            return create_document_in_txn(txn, doc_id, body, kind=kind, writer=writer)

        return self.state_store.transact(work)

    def get(self, doc_id: str) -> Document:
        """The latest version; ``DocumentNotFound`` if there is none. It unpacks as
        ``content, version = docs.get(doc_id)`` (the pair a later ``save`` is based on) and
        carries the rest (hash, timestamps, last writer) as attributes."""
        doc_id = check_doc_id(doc_id)
        return self.state_store.read(lambda txn: get_document_in_txn(txn, doc_id))

    def save(self, doc_id: str, content: Any, *, expected_version: int, writer: str | None) -> int:
        """Replace the document with ``content`` if it is still at ``expected_version``.

        One conditional update (``WHERE version = expected``) with its row count checked, and the
        history row, in one transaction. Returns the version the document is at afterwards:
        ``expected_version + 1``, or the stored version when ``content`` is already what is
        stored (a no-op, answered whatever the expected version). Raises
        ``VersionConflict(current_version)`` or ``DocumentNotFound``; nothing is written then.
        ``writer`` is who the caller says it is, recorded in the history.
        """
        doc_id, writer = check_doc_id(doc_id), check_writer(writer)
        expected = check_version(expected_version)
        body = self._content(content)

        def work(txn: Txn) -> int:
            return save_document_in_txn(txn, doc_id, body, expected_version=expected, writer=writer)

        return self.state_store.transact(work)

    def history(self, doc_id: str) -> tuple[DocumentVersion, ...]:
        """Every saved version, oldest first (version 1 is the create): who, when, which
        content digest. ``DocumentNotFound`` if there is no such document."""
        doc_id = check_doc_id(doc_id)
        return self.state_store.read(lambda txn: history_in_txn(txn, doc_id))

    def list(self, *, limit: int = 200) -> tuple[DocumentSummary, ...]:
        """Up to ``limit`` (1-10,000) documents, the most recently saved first, without their
        content. ``InvalidArgument`` for a limit out of range."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise InvalidArgument(f"limit must be an integer from 1 to 10000, not {limit!r}")
        return self.state_store.read(lambda txn: list_documents_in_txn(txn, limit))
