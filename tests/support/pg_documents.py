"""A minimal Postgres ``transact``/``read`` for the documents tests, until the Postgres store
lands on main.

It runs ctrlrun's own ``postgres/migrations/0002_documents.sql`` and ``postgres/documents.sql``
unchanged, with ``{schema}`` composed by ``psycopg.sql.Identifier`` (as the store will), and hands
the real ``*_in_txn`` functions a ``Txn`` over psycopg. ``hooks`` maps a query name to a callable
run just before that query, so a test can line two transactions up at a precise statement.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ctrlrun.store.queries import load_queries

T = TypeVar("T")


def compose(text: str, schema: str) -> sql.Composed:
    """``text`` with ``{schema}`` replaced by the quoted identifier ``schema``."""
    return sql.SQL(text).format(schema=sql.Identifier(schema))  # type: ignore[arg-type]


def migration_text(name: str) -> str:
    folder = resources.files("ctrlrun.store").joinpath("sql", "postgres", "migrations")
    return folder.joinpath(name).read_text(encoding="utf-8")


class PgTxn:
    """A ``ctrlrun.store.ops.Txn`` over one psycopg connection inside a transaction."""

    def __init__(self, conn: psycopg.Connection[Any], store: PgDocumentsStore) -> None:
        self._conn, self._store = conn, store
        row = conn.execute("SELECT now() AS now").fetchone()
        self.now: datetime = row["now"].astimezone(UTC)

    def _execute(self, query: str, params: Mapping[str, Any]) -> psycopg.Cursor[Any]:
        hook = self._store.hooks.get(query)
        if hook is not None:
            hook()
        return self._conn.execute(self._store.statement(query), params)

    def one(self, query: str, params: Mapping[str, Any]) -> Any:
        return self._execute(query, params).fetchone()

    def all(self, query: str, params: Mapping[str, Any]) -> Sequence[Any]:
        return self._execute(query, params).fetchall()

    def run(self, query: str, params: Mapping[str, Any]) -> int:
        return self._execute(query, params).rowcount

    def run_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> None:
        for one in params:
            self._execute(query, one)

    def ts(self, value: datetime | None) -> datetime | None:
        return value

    def read_ts(self, value: Any) -> datetime:
        return value.astimezone(UTC)


class PgDocumentsStore:
    """Just enough of a ``StateStore`` for ``DocumentStore``: ``transact``, ``read``."""

    dialect = "postgres"

    def __init__(self, url: str, schema: str) -> None:
        self.url, self.schema = url, schema
        self.hooks: dict[str, Callable[[], None]] = {}
        self._queries = load_queries("postgres")
        self._local = threading.local()
        self._all: list[psycopg.Connection[Any]] = []
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(compose(migration_text("0002_documents.sql"), schema))

    def statement(self, query: str) -> sql.Composed:
        return compose(self._queries[query], self.schema)

    def _connection(self) -> psycopg.Connection[Any]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = psycopg.connect(self.url, autocommit=True, row_factory=dict_row)
            self._local.conn = conn
            self._all.append(conn)
        return conn

    def transact(self, work: Callable[[PgTxn], T]) -> T:
        conn = self._connection()
        with conn.transaction():
            return work(PgTxn(conn, self))

    def read(self, work: Callable[[PgTxn], T]) -> T:
        return self.transact(work)

    def close(self) -> None:
        for conn in self._all:
            conn.close()
