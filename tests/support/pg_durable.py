"""A minimal Postgres host for the durable parts, until the Postgres store lands on main.

``PgDurableStore`` offers exactly what the durable parts use of a store — ``dialect``,
``schema``, ``transact(work)``, ``read(work)`` — over psycopg, with the conventions the
Postgres store will have: one connection per thread, schema-qualified SQL composed with
``psycopg.sql.Identifier``, ``txn.now`` read from the server (``now()``) inside the
transaction, ``KeptRefusal`` committed before its refusal is raised. It applies the real
``postgres/migrations/0003_durable.sql`` and runs the real ``postgres/durable.sql`` queries, so
the tests prove the shipped SQL and the dialect-neutral logic together; wiring them into the
store is then mechanical.

The receipt chain belongs to the store's own baseline migration (not on main yet for Postgres):
``STAND_IN_CHAIN`` below is a test-only stand-in for those two tables and three queries, so plan
steps can chain their receipts here exactly as they do on SQLite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ctrlrun.canonical import GENESIS_HASH
from ctrlrun.store.ops import KeptRefusal
from ctrlrun.store.queries import load_queries, migration_files

T = TypeVar("T")

STAND_IN_CHAIN = {
    "tables": [
        'CREATE TABLE {schema}.receipts (receipt_id text COLLATE "C" PRIMARY KEY,'
        " seq bigint UNIQUE, action_id text NOT NULL, effect_key text, result text NOT NULL,"
        " document text NOT NULL, hash text, created_at timestamptz NOT NULL)",
        "CREATE TABLE {schema}.receipt_chain (id integer PRIMARY KEY CHECK (id = 1),"
        " seq bigint NOT NULL, hash text NOT NULL)",
        "INSERT INTO {schema}.receipt_chain VALUES (1, 0, '" + GENESIS_HASH + "')",
    ],
    "queries": {
        "chain_head_lock": "SELECT seq, hash FROM {schema}.receipt_chain WHERE id = 1 FOR UPDATE",
        "chain_head_set": "UPDATE {schema}.receipt_chain SET seq = %(seq)s, hash = %(hash)s"
        " WHERE id = 1",
        "receipt_insert": "INSERT INTO {schema}.receipts (receipt_id, seq, action_id, effect_key,"
        " result, document, hash, created_at) VALUES (%(receipt_id)s, %(seq)s, %(action_id)s,"
        " %(effect_key)s, %(result)s, %(document)s, %(hash)s, now())",
    },
}


def split_sql(text: str) -> list[str]:
    """The statements of a migration file (statements end with ``;`` at the end of a line)."""
    statements, buffer = [], []
    for line in text.splitlines():
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(buffer).rstrip().rstrip(";"))
            buffer = []
    assert not "".join(buffer).strip(), buffer
    return statements


class PgTxn:
    """A ``Txn`` over one psycopg connection inside one transaction."""

    def __init__(self, conn: psycopg.Connection[Any], store: PgDurableStore) -> None:
        self._conn, self._store = conn, store
        row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        self.now: datetime = row[0].astimezone(UTC)

    @property
    def connection(self) -> psycopg.Connection[Any]:
        return self._conn

    def _execute(self, query: str, params: Mapping[str, Any]) -> psycopg.Cursor[Any]:
        cursor = self._conn.cursor(row_factory=dict_row)
        cursor.execute(self._store.statement(query), params)
        return cursor

    def one(self, query: str, params: Mapping[str, Any]) -> Any:
        return self._execute(query, params).fetchone()

    def all(self, query: str, params: Mapping[str, Any]) -> list[Any]:
        return self._execute(query, params).fetchall()

    def run(self, query: str, params: Mapping[str, Any]) -> int:
        return self._execute(query, params).rowcount

    def run_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> None:
        for item in params:
            self.run(query, item)

    def ts(self, value: datetime | None) -> datetime | None:
        return value

    def read_ts(self, value: Any) -> datetime:
        assert isinstance(value, datetime)
        return value.astimezone(UTC)


class PgDurableStore:
    """See the module docstring."""

    dialect = "postgres"

    def __init__(self, url: str, schema: str, *, migrate: bool = True) -> None:
        self.url, self.schema = url, schema
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[psycopg.Connection[Any]] = []
        self._queries = {**load_queries("postgres"), **STAND_IN_CHAIN["queries"]}
        if migrate:
            self._migrate()

    def statement(self, name: str) -> sql.Composed:
        return sql.SQL(self._queries[name]).format(schema=sql.Identifier(self.schema))

    def _migrate(self) -> None:
        conn = self._connection()
        with conn.transaction():
            for _, text in migration_files("postgres"):
                for statement in split_sql(text):
                    conn.execute(sql.SQL(statement).format(schema=sql.Identifier(self.schema)))
            for statement in STAND_IN_CHAIN["tables"]:
                conn.execute(sql.SQL(statement).format(schema=sql.Identifier(self.schema)))

    def _connection(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def transact(self, work: Callable[[PgTxn], T]) -> T:
        conn = self._connection()
        refusal = None
        with conn.transaction():
            try:
                result = work(PgTxn(conn, self))
            except KeptRefusal as kept:
                refusal = kept.refusal
        if refusal is not None:
            raise refusal
        return result

    def read(self, work: Callable[[PgTxn], T]) -> T:
        conn = self._connection()
        with conn.transaction():
            return work(PgTxn(conn, self))

    def execute(self, text: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        """Test helper: run ``text`` (``{schema}`` composed) in its own transaction."""
        conn = self._connection()
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(sql.SQL(text).format(schema=sql.Identifier(self.schema)), params)
            return cursor.fetchall() if cursor.description else []

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()
