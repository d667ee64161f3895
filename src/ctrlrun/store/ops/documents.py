"""Versioned documents inside a write transaction, identical for every SQL backend.

Each function reads through the ``Txn``, lets ``kernel.document.plan_save`` decide, and writes
with conditional statements whose row counts are checked: the create is an insert that does
nothing on an existing id, the save one ``UPDATE … WHERE version = expected``.
"""

from __future__ import annotations

import json

from ctrlrun.errors import DocumentExists, DocumentNotFound, StoreError
from ctrlrun.kernel.document import (
    Content,
    Document,
    DocumentSummary,
    DocumentVersion,
    SaveKind,
    Stored,
    check_version,
    plan_save,
)
from ctrlrun.store.codec import Row
from ctrlrun.store.ops import Txn


def _document(row: Row, txn: Txn) -> Document:
    return Document(
        doc_id=row["doc_id"],
        kind=row["kind"],
        version=int(row["version"]),
        content=json.loads(row["content"]),
        content_hash=row["content_hash"],
        created_at=txn.read_ts(row["created_at"]),
        updated_at=txn.read_ts(row["updated_at"]),
        updated_by=row["updated_by"],
    )


def get_document_in_txn(txn: Txn, doc_id: str) -> Document:
    """The stored document; ``DocumentNotFound`` if there is none."""
    row = txn.one("document_get", {"doc_id": doc_id})
    if row is None:
        raise DocumentNotFound(f"no document {doc_id!r}", doc_id=doc_id)
    return _document(row, txn)


def _stored_in_txn(txn: Txn, doc_id: str) -> Stored | None:
    row = txn.one("document_get", {"doc_id": doc_id})
    return None if row is None else Stored(int(row["version"]), row["content_hash"])


def create_document_in_txn(
    txn: Txn, doc_id: str, content: Content, *, kind: str, writer: str | None
) -> Document:
    """Insert version 1 and its history row; ``DocumentExists`` (nothing written) if the id is
    taken. The insert does nothing on a conflict, so a concurrent creator loses cleanly."""
    params = {
        "doc_id": doc_id,
        "kind": kind,
        "content": content.text,
        "content_hash": content.hash,
        "saved_at": txn.ts(txn.now),
        "writer": writer,
    }
    if txn.run("document_insert", params) != 1:
        stored = _stored_in_txn(txn, doc_id)
        raise DocumentExists(
            f"document {doc_id!r} already exists",
            doc_id=doc_id,
            current_version=stored.version if stored is not None else 0,
        )
    txn.run("document_version_insert", {**params, "version": 1})
    return get_document_in_txn(txn, doc_id)


def save_document_in_txn(
    txn: Txn, doc_id: str, content: Content, *, expected_version: int, writer: str | None
) -> int:
    """Compare-and-swap ``content`` onto ``doc_id`` if it is still at ``expected_version``.

    Returns the version the document is at afterwards: ``expected_version + 1`` after a write,
    the stored version when the content was already stored (a no-op). Raises
    ``VersionConflict(current_version)`` or ``DocumentNotFound`` with nothing written. An update
    that matches no row lost a race to a concurrent writer: the row is re-read and the refusal
    decided from what is stored now, never assumed.
    """
    check_version(expected_version)
    plan = plan_save(_stored_in_txn(txn, doc_id), content, expected_version, doc_id=doc_id)
    if plan.kind is SaveKind.NOOP:
        return plan.version
    params = {
        "doc_id": doc_id,
        "version": plan.version,
        "expected_version": plan.expected_version,
        "content": content.text,
        "content_hash": content.hash,
        "saved_at": txn.ts(txn.now),
        "writer": writer,
    }
    if txn.run("document_update", params) != 1:
        # A lost race (Postgres under READ COMMITTED): plan again against what is stored now,
        # which raises the conflict, or answers the winner's identical content.
        replanned = plan_save(_stored_in_txn(txn, doc_id), content, expected_version, doc_id=doc_id)
        if replanned.kind is SaveKind.NOOP:
            return replanned.version
        raise StoreError(
            f"document {doc_id!r}: the conditional update matched no row although the row is"
            f" at version {expected_version}; refusing rather than retrying"
        )
    txn.run("document_version_insert", params)
    return plan.version


def history_in_txn(txn: Txn, doc_id: str) -> tuple[DocumentVersion, ...]:
    """Every saved version of ``doc_id``, oldest first; ``DocumentNotFound`` if it is unknown."""
    if txn.one("document_get", {"doc_id": doc_id}) is None:
        raise DocumentNotFound(f"no document {doc_id!r}", doc_id=doc_id)
    return tuple(
        DocumentVersion(
            version=int(row["version"]),
            content_hash=row["content_hash"],
            writer=row["writer"],
            saved_at=txn.read_ts(row["saved_at"]),
        )
        for row in txn.all("document_history", {"doc_id": doc_id})
    )


def list_documents_in_txn(txn: Txn, limit: int) -> tuple[DocumentSummary, ...]:
    """Up to ``limit`` documents, the most recently saved first, without their content."""
    return tuple(
        DocumentSummary(
            doc_id=row["doc_id"],
            kind=row["kind"],
            version=int(row["version"]),
            updated_at=txn.read_ts(row["updated_at"]),
            updated_by=row["updated_by"],
        )
        for row in txn.all("document_list", {"limit": limit})
    )
