"""Documents fixtures: a ``DocumentStore`` on a real SQLite file, or on the real
``PostgresStateStore`` in a private schema of the test server."""

from __future__ import annotations

import pytest

from ctrlrun.documents.store import DocumentStore
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store.sqlite import SQLiteStateStore
from support.http_server import Served


@pytest.fixture
def sqlite_state(tmp_path):
    # durability "normal": these tests are about versions, not power cuts, and stay fast
    state = SQLiteStateStore(tmp_path / "state.db", durability="normal")
    yield state
    state.close()


@pytest.fixture
def pg_state(pg_schema):
    state = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    yield state
    state.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request):
    """The name and the ``transact``/``read`` store of each backend."""
    fixture = "sqlite_state" if request.param == "sqlite" else "pg_state"
    return request.param, request.getfixturevalue(fixture)


@pytest.fixture
def docs(backend):
    return DocumentStore(backend[1])


@pytest.fixture
def sqlite_docs(sqlite_state):
    return DocumentStore(sqlite_state)


@pytest.fixture
def served(docs):
    """The HTTP API on each backend."""
    running = Served(docs)
    yield running
    running.stop()


@pytest.fixture
def drafts(tmp_path):
    return tmp_path / "drafts"
