"""Test-only SQL against one Postgres schema, from outside any store: raw statements with
``{schema}`` composed by ``psycopg.sql.Identifier`` (as the store composes its own), and a
bounded wait for a backend to queue on a lock.

Shipping code has no such helper: a test that moves a lease into the past, creates an
application table or reads a row as the database holds it does it here, on its own
connection, never through a store.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from .pg import PgServer


def compose(text: str, schema: str) -> sql.Composed:
    """``text`` with every ``{schema}`` replaced by the quoted identifier ``schema``."""
    return sql.SQL(text).format(schema=sql.Identifier(schema))  # type: ignore[arg-type]


def execute(
    url: str, schema: str, text: str, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Run ``text`` (``%(name)s`` parameters) in a transaction of its own; its rows as dicts."""
    with psycopg.connect(url, row_factory=dict_row, connect_timeout=10) as conn:
        cursor = conn.execute(compose(text, schema), dict(params or {}))
        return cursor.fetchall() if cursor.description else []


def wait_for_lock_waiter(
    server: PgServer, pattern: str, timeout: float = 30.0, *, event: str | None = None
) -> None:
    """Block until some backend whose query is LIKE ``pattern`` waits on a lock — of kind
    ``event`` (``transactionid``, ``advisory``, …) when given, since one message may hold the
    text of several statements — (a bounded poll for a state, never a sleep to hit a race)."""
    deadline = time.monotonic() + timeout
    with server.connect() as conn:
        while time.monotonic() < deadline:
            found = conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE %s AND (%s::text IS NULL OR wait_event = %s::text)",
                [pattern, event, event],
            ).fetchone()
            if found:
                return
            time.sleep(0.01)
    raise TimeoutError(f"no backend running {pattern!r} waited on a lock")


def schemas_like(server: PgServer, prefix: str) -> list[str]:
    """The schemas whose name starts with ``prefix`` (what a scratch run may have left)."""
    with server.connect() as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s) ORDER BY 1",
            [prefix],
        ).fetchall()
    return [str(row[0]) for row in rows]


def objects_in(server: PgServer, schema: str) -> list[tuple[str, str]]:
    """Every relation, function, type and trigger in ``schema``, by kind and name."""
    with server.connect() as conn:
        rows = conn.execute(
            "SELECT 'relation ' || relkind::text, relname::text FROM pg_class"
            "  WHERE relnamespace = %(s)s::regnamespace"
            " UNION ALL SELECT 'function', proname::text FROM pg_proc"
            "  WHERE pronamespace = %(s)s::regnamespace"
            " UNION ALL SELECT 'type', typname::text FROM pg_type"
            "  WHERE typnamespace = %(s)s::regnamespace"
            " UNION ALL SELECT 'trigger', t.tgname::text FROM pg_trigger t"
            "  JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = %(s)s::regnamespace"
            " ORDER BY 1, 2",
            {"s": schema},
        ).fetchall()
    return [(str(kind), str(name)) for kind, name in rows]
