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
from ctrlrun.kernel.document import Document, DocumentSummary, DocumentVersion

__all__ = [
    "Document",
    "DocumentClient",
    "DocumentSession",
    "DocumentStore",
    "DocumentSummary",
    "DocumentVersion",
    "Draft",
    "HttpDocumentClient",
    "LocalDocumentClient",
    "ManualScheduler",
    "Resolve",
    "Scheduler",
    "SessionState",
    "ThreadScheduler",
    "merge_json_objects",
]
