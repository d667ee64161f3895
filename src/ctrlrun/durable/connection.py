"""Running one named durable query on a caller's own database connection.

The outbox's ``enqueue_in_txn`` writes through the application's connection (sqlite3 now,
psycopg with the Postgres store), so the application's row and the message commit together or
not at all. The dialect and the schema come from the store: SQLite binds ``:name`` parameters;
Postgres statements are written ``{schema}.table`` and composed with ``psycopg.sql`` (the schema
an ``Identifier``, never interpolated text) and bind ``%(name)s`` parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctrlrun.errors import InvalidArgument
from ctrlrun.store.queries import load_queries


def check_in_transaction(conn: Any, dialect: str) -> None:
    """Refuse a connection that would commit the statement on its own (autocommit, no open
    transaction): the message must commit with the caller's work or not at all."""
    if dialect == "sqlite":
        if getattr(conn, "isolation_level", "") is None and not conn.in_transaction:
            raise InvalidArgument(
                "the connection is in autocommit mode with no open transaction: BEGIN first,"
                " so the message commits together with your own writes"
            )
        return
    if getattr(conn, "autocommit", False):
        status = conn.info.transaction_status
        if int(status) == 0:  # psycopg.pq.TransactionStatus.IDLE
            raise InvalidArgument(
                "the connection is in autocommit mode with no open transaction: use"
                " `with conn.transaction():` so the message commits with your own writes"
            )


def execute(
    conn: Any, dialect: str, schema: str | None, name: str, params: Mapping[str, Any]
) -> tuple[int, list[Any]]:
    """Run named query ``name`` on ``conn``; its row count and its rows (as mappings)."""
    text = load_queries(dialect)[name]
    if dialect == "sqlite":
        cursor = conn.execute(text, params)
        rows = cursor.fetchall() if cursor.description else []
        if rows and not hasattr(rows[0], "keys"):
            columns = [c[0] for c in cursor.description]
            rows = [dict(zip(columns, row, strict=True)) for row in rows]
        return int(cursor.rowcount), rows
    if dialect != "postgres":
        raise InvalidArgument(f"no durable queries for dialect {dialect!r}")
    from psycopg import sql
    from psycopg.rows import dict_row

    statement = sql.SQL(text).format(schema=sql.Identifier(schema or "public"))
    with conn.cursor(row_factory=dict_row) as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall() if cursor.description else []
        return int(cursor.rowcount), rows
