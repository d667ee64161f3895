"""Connections: one autocommit psycopg connection per thread, and per process after a fork.

The URL goes to ``psycopg.connect`` unchanged (every libpq form, ``PG*`` variables). Connections
are made in autocommit mode, so a read runs outside any transaction and a write opens its own
with an explicit ``BEGIN``; no prepared statement is ever created (``prepare_threshold=None``)
and no session setting is changed, so a pooler in transaction mode can hand the server
connection to anyone between two transactions.

Every new connection is shown to ``on_connect`` first (the replication guard: ``replication``).
A broken connection is replaced only between transactions (``current``) and for the re-read
after a lost COMMIT (``fresh``); nothing here retries. ``close`` releases every connection this
process opened and is not a fence: the next call connects again. A connection inherited
through ``fork`` is abandoned, never closed by the child, because closing it would end the
parent's session on the shared socket.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

Connection = psycopg.Connection[dict[str, Any]]


class Connections:
    """The connections of one store handle."""

    def __init__(self, url: str, *, on_connect: Callable[[Connection], None] | None = None) -> None:
        self._url = url
        self._on_connect = on_connect
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[tuple[int, Connection]] = []

    def connect(self) -> Connection:
        """A new autocommit connection (not registered as any thread's), after ``on_connect``
        accepted it (what it raises is raised, the connection closed)."""
        conn: Connection = psycopg.connect(
            self._url, autocommit=True, prepare_threshold=None, row_factory=dict_row
        )
        if self._on_connect is not None:
            try:
                self._on_connect(conn)
            except BaseException:
                _close_quietly(conn)
                raise
        with self._lock:
            self._open.append((os.getpid(), conn))
        return conn

    def current(self) -> Connection:
        """This thread's connection, replaced first if it is closed or broken."""
        local = self._local
        conn: Connection | None = getattr(local, "conn", None)
        if conn is not None and local.pid == os.getpid() and not (conn.closed or conn.broken):
            return conn
        if conn is not None and local.pid == os.getpid():
            self.discard(conn)
        return self.adopt(self.connect())

    def fresh(self) -> Connection:
        """A new connection that becomes this thread's (the old one is discarded)."""
        conn = self.connect()
        old: Connection | None = getattr(self._local, "conn", None)
        if old is not None and self._local.pid == os.getpid():
            self.discard(old)
        return self.adopt(conn)

    def adopt(self, conn: Connection) -> Connection:
        """Make ``conn`` this thread's connection."""
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def discard(self, conn: Connection) -> None:
        """Close ``conn`` (quietly: it may already be broken) and forget it."""
        with self._lock:
            self._open = [(pid, c) for pid, c in self._open if c is not conn]
        _close_quietly(conn)

    def close(self) -> None:
        """Close every connection this process opened; later calls reconnect."""
        pid = os.getpid()
        with self._lock:
            mine = [conn for owner, conn in self._open if owner == pid]
            self._open = []
            self._local = threading.local()
        for conn in mine:
            _close_quietly(conn)


def _close_quietly(conn: Connection) -> None:
    with contextlib.suppress(psycopg.Error):  # a broken connection has nothing left to release
        conn.close()
