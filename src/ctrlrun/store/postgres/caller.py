"""A named query run on the caller's own psycopg connection, inside the caller's transaction
(the outbox's ``enqueue_in_txn``): the statement is written ``{schema}.table`` and composed
with ``psycopg.sql`` (the schema an ``Identifier``, never interpolated text)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg import pq, sql
from psycopg.rows import dict_row

from ctrlrun.errors import InvalidArgument
from ctrlrun.store.queries import load_queries


def execute_on(
    conn: Any, schema: str, name: str, params: Mapping[str, Any]
) -> tuple[int, list[Any]]:
    """Named query ``name`` on ``conn``: its row count and its rows (as mappings).
    ``InvalidArgument`` for a connection that would commit the statement on its own."""
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        raise InvalidArgument(
            "the connection is in autocommit mode with no open transaction: use"
            " `with conn.transaction():` so the message commits with your own writes"
        )
    statement = sql.SQL(load_queries("postgres")[name]).format(schema=sql.Identifier(schema))
    with conn.cursor(row_factory=dict_row) as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall() if cursor.description else []
        return int(cursor.rowcount), rows
