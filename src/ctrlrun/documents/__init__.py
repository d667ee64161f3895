"""Versioned documents: compare-and-swap saves (``DocumentStore``), an HTTP API
(``ctrlrun.documents.server``, extra ``ctrlrun[server]``) and a client ``DocumentSession`` in
which no edit is lost silently and no overwrite is silent. See ``docs/documents.md``.

Importing this package imports no optional dependency; the server module does.
"""
