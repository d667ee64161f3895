"""Versioned documents: compare-and-swap saves (``DocumentStore``), an HTTP API
(``ctrlrun.documents.server``, extra ``ctrlrun[server]``) and a client ``DocumentSession`` in
which no edit is lost silently and no overwrite is silent. See ``docs/documents.md``.

Importing this package imports no optional dependency; only the server module does.
"""

from ctrlrun.documents.client import DocumentClient, HttpDocumentClient, LocalDocumentClient
from ctrlrun.documents.drafts import Draft
from ctrlrun.documents.merge import Resolve, merge_json_objects
from ctrlrun.documents.schedule import ManualScheduler, Scheduler, ThreadScheduler
from ctrlrun.documents.session import DocumentSession, SessionState
from ctrlrun.documents.store import DocumentStore
from ctrlrun.errors import (
    DocumentExists,
    DocumentNotFound,
    DocumentTooLarge,
    MergeConflict,
    PreconditionRequired,
    VersionConflict,
)
from ctrlrun.kernel.document import Document, DocumentSummary, DocumentVersion

__all__ = [
    "Document",
    "DocumentClient",
    "DocumentExists",
    "DocumentNotFound",
    "DocumentSession",
    "DocumentStore",
    "DocumentSummary",
    "DocumentTooLarge",
    "DocumentVersion",
    "Draft",
    "HttpDocumentClient",
    "LocalDocumentClient",
    "ManualScheduler",
    "MergeConflict",
    "PreconditionRequired",
    "Resolve",
    "Scheduler",
    "SessionState",
    "ThreadScheduler",
    "VersionConflict",
    "merge_json_objects",
]
