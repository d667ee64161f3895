"""Store fixtures: every backend-agnostic store test runs on SQLite (a real file) and on
Postgres (a private schema on the session's real server), with a clock the test moves.

``backend`` opens further handles on the same storage (``backend.open()``) and alters rows
behind the store's back (``backend.tamper(sql, …)``, plain SQL run against the store's own
tables), so the same test proves the same contract on both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctrlrun._time import utc_now
from ctrlrun.store.sqlite import SQLiteStateStore
from ctrlrun.testing import ManualClock
from support.clocks import DEFAULT_START


class Backend:
    """One backend's storage for one test: open handles on it, tamper with its rows."""

    name: str

    def open(self, clock: Any = None) -> Any:
        raise NotImplementedError

    def tamper(self, *statements: str) -> None:
        raise NotImplementedError


class SQLiteBackend(Backend):
    name = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, clock: Any = None) -> SQLiteStateStore:
        return SQLiteStateStore(self.path, clock=clock)

    def tamper(self, *statements: str) -> None:
        import sqlite3

        with sqlite3.connect(self.path) as conn:
            for statement in statements:
                conn.execute(statement)


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, pg_schema: Any) -> None:
        self.pg_schema = pg_schema

    def open(self, clock: Any = None) -> Any:
        from ctrlrun.postgres import PostgresStateStore

        # one chain, as SQLite keeps it: these tests cut, reorder and tamper by seq; several
        # chains are proven by test_partitions.py
        return PostgresStateStore(
            self.pg_schema.url, schema=self.pg_schema.schema, clock=clock, partitions=1
        )

    def tamper(self, *statements: str) -> None:
        with self.pg_schema.connect() as conn:  # search_path = the store's schema
            for statement in statements:
                conn.execute(statement)


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return SQLiteBackend(tmp_path / "state.db")
    return PostgresBackend(request.getfixturevalue("pg_schema"))


@pytest.fixture
def clock(backend: Backend) -> ManualClock:
    # On Postgres the application clock is measured against the server's at open: start the
    # fake clock at the real time so only a test that moves it reports skew.
    return ManualClock(DEFAULT_START) if backend.name == "sqlite" else ManualClock(utc_now())


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def store(backend: Backend, clock: ManualClock) -> Iterator[Any]:
    opened = backend.open(clock)
    yield opened
    opened.close()
