"""The embedded SQLite state store: one file, WAL, ``BEGIN IMMEDIATE`` for every write.

Durable by default (``synchronous=FULL``): a committed reservation lost to a power cut would be a
double execution waiting to happen. ``durability="normal"`` trades that for throughput and says
so. One connection per thread (and per process after a fork); contenders wait on the busy
timeout instead of failing. The store decides with the kernel planners and then only writes.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TypeVar

from ctrlrun._time import Clock, decode_instant, encode_instant, utc_now
from ctrlrun._version import __version__
from ctrlrun.errors import InvalidArgument, SchemaMismatch, StoreError, StoreNotFound
from ctrlrun.store.base import SQLStore
from ctrlrun.store.migrate import check_current, migrate_forward
from ctrlrun.store.ops import KeptRefusal, Txn
from ctrlrun.store.queries import load_queries, migration_files
from ctrlrun.store.sqlite_files import can_read, create_private, wal_path
from ctrlrun.store.sqlite_rows import ROWS_PER_STATEMENT, row_names, rows_statement

T = TypeVar("T")

DURABILITY: Final = {"full": "FULL", "normal": "NORMAL"}
DEFAULT_BUSY_TIMEOUT: Final = 30.0

# A connection must never cross a fork. Counting forks in the child (instead of comparing
# os.getpid() on every transaction, a system call each time) tells a thread's connection
# made before the fork from one made after.
_forks = [0]  # a cell, so the fork hook updates it in place


def _forked() -> None:
    _forks[0] += 1


if hasattr(os, "register_at_fork"):  # pragma: no branch - every POSIX CPython has it
    os.register_at_fork(after_in_child=_forked)


class _Txn:
    """A ``Txn`` over one sqlite3 connection inside ``BEGIN IMMEDIATE``.

    Writes and single-row reads go through the thread's one cursor (``cursor``), reused
    across transactions: a write's result is only its row count, a ``one`` read's is copied
    out at once, and a new cursor per statement is an allocation per statement. ``all``
    takes its own cursor, so the rows it hands out never hold the writer's.
    """

    __slots__ = ("_conn", "_cur", "_now_text", "_queries", "now")

    def __init__(
        self,
        conn: sqlite3.Connection,
        queries: Mapping[str, str],
        now: datetime,
        cursor: sqlite3.Cursor | None = None,
    ) -> None:
        self._conn, self._queries, self.now = conn, queries, now
        self._cur = cursor or conn.cursor()
        self._now_text: str | None = None

    def one(self, query: str, params: Mapping[str, Any]) -> sqlite3.Row | None:
        # The write cursor too: the row is copied out by fetchone, and the cursor's next
        # statement resets this one, so nothing stays pending on it.
        row: sqlite3.Row | None = self._cur.execute(self._queries[query], params).fetchone()
        return row

    def all(self, query: str, params: Mapping[str, Any]) -> list[sqlite3.Row]:
        return self._conn.execute(self._queries[query], params).fetchall()

    def run(self, query: str, params: Mapping[str, Any]) -> int:
        return self._cur.execute(self._queries[query], params).rowcount

    def run_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> None:
        # One multi-row statement instead of one execution per row: a call's events are one
        # statement, not four (each execution is a step through the VM and the bindings).
        sql = self._queries[query]
        if len(params) == 1:
            self._cur.execute(sql, params[0])
            return
        names = row_names(sql)
        if names is None:
            self._cur.executemany(sql, params)
            return
        self._insert_rows(sql, [tuple(row[name] for name in names) for row in params])

    def insert_event_rows(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """See ``Txn.insert_event_rows``: one statement per ``ROWS_PER_STATEMENT`` rows."""
        self._insert_rows(self._queries["event_insert"], rows)

    def _insert_rows(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """``sql`` (a plain ``INSERT … VALUES (…)``) for every row, positionally, many rows per
        statement."""
        if len(rows) == 1:
            self._cur.execute(rows_statement(sql, 1), rows[0])
            return
        for first in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[first : first + ROWS_PER_STATEMENT]
            self._cur.execute(rows_statement(sql, len(chunk)), [v for row in chunk for v in row])

    def run_later(self, query: str, params: Mapping[str, Any]) -> None:
        self._cur.execute(self._queries[query], params)  # in-process: nothing to save

    def ts(self, value: datetime | None) -> str | None:
        if value is None:
            return None
        if value is self.now:  # stamped several times per transaction: encode it once
            if self._now_text is None:
                self._now_text = encode_instant(value)
            return self._now_text
        return encode_instant(value)

    def read_ts(self, value: Any) -> datetime:
        return _stored_instant(value)

    @property
    def connection(self) -> sqlite3.Connection:
        """The driver connection this transaction runs on, for parts that hand a step its own
        SQL (durable plan steps): what it writes commits or rolls back with this transaction."""
        return self._conn

    @property
    def schema(self) -> None:
        """SQLite has no schemas: tables are named bare."""
        return None


def check_sqlite_path(path: str | os.PathLike[str]) -> Path:
    """An absolute file path for a store; ``InvalidArgument`` for in-memory or empty paths."""
    text = os.fspath(path)
    if not text or text == ":memory:" or "mode=memory" in text or text.startswith("file:"):
        raise InvalidArgument(f"a SQLite store needs a file path, not {text!r}")
    resolved = Path(text).expanduser().absolute()
    if not resolved.parent.is_dir():
        raise InvalidArgument(
            f"cannot create a store at {resolved}: no directory {resolved.parent}"
        )
    return resolved


class SQLiteStateStore(SQLStore):
    """``StateStore`` on one SQLite file. See the module docstring for the guarantees.

    Opening migrates the file forward (creating it if absent) and refuses a schema that is
    ahead of or diverges from this binary, naming both, before any other table is read.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        clock: Clock | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
        _mode: str | None = None,
    ) -> None:
        if durability not in DURABILITY:
            raise InvalidArgument(f"durability is 'full' or 'normal', not {durability!r}")
        try:
            self.path = check_sqlite_path(path)
        except InvalidArgument:
            wanted = Path(os.fspath(path)).expanduser().absolute()
            if not create and os.fspath(path) and not wanted.parent.is_dir():
                refuse_absent(wanted)  # no directory, so no store: not found, not "bad path"
            raise
        if not create:
            refuse_absent(self.path)
        self.durability = durability
        self._clock = clock or utc_now
        self._busy_timeout = busy_timeout
        self._queries = load_queries("sqlite")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._writes = itertools.count()
        self._write_count = 0
        self._mode = _mode
        if _mode is None:
            create_private(self.path)
            self._wrap(self._migrate)
        else:
            self._wrap(self._check_current)

    @classmethod
    def open_existing(
        cls, path: str | os.PathLike[str], *, clock: Clock | None = None, read_only: bool = False
    ) -> SQLiteStateStore:
        """Open a store that must already exist at the current schema; create and migrate
        nothing. For commands that read evidence. Raises ``SchemaMismatch`` otherwise.

        With ``read_only`` every connection is opened ``mode=ro``: a write fails, and the file
        can be read where it cannot be written (a read-only directory or medium; see
        ``_connect``)."""
        resolved = Path(os.fspath(path)).expanduser().absolute()
        if not resolved.is_file():
            raise SchemaMismatch(f"no ctrlrun store at {resolved}")
        return cls(resolved, clock=clock, _mode="ro" if read_only else "rw")

    # --- connections ----------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        return self._thread_handles()[0]

    def _thread_handles(self) -> tuple[sqlite3.Connection, sqlite3.Cursor]:
        """This thread's connection and its write cursor, made after the latest fork."""
        local = self._local
        handles: tuple[sqlite3.Connection, sqlite3.Cursor] | None = getattr(local, "handles", None)
        if handles is not None and local.forks == _forks[0]:
            return handles
        conn = self._connect()
        handles = (conn, conn.cursor())
        local.handles, local.forks = handles, _forks[0]
        with self._lock:
            self._connections.append(conn)
        return handles

    def _connect(self) -> sqlite3.Connection:
        if self._mode is not None:
            conn = self._connect_uri(f"mode={self._mode}")
            if self._mode == "ro" and not can_read(conn) and not wal_path(self.path).exists():
                # A read-only directory: a WAL reader cannot create the -shm index. With no
                # -wal file every committed page is in the main file, and nobody can be
                # writing it (a writer would need the -wal), so read it as immutable.
                conn.close()
                conn = self._connect_uri("mode=ro&immutable=1")
        else:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
            )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA synchronous = {DURABILITY[self.durability]}")
        return conn

    def _connect_uri(self, query: str) -> sqlite3.Connection:
        return sqlite3.connect(
            f"{self.path.as_uri()}?{query}",
            uri=True,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )

    def close(self) -> None:
        """Close every connection this store opened. Later calls reconnect (not a fence)."""
        with self._lock:
            connections, self._connections = self._connections, []
            self._local = threading.local()
        for conn in connections:
            conn.close()

    @property
    def write_transactions(self) -> int:
        """How many write transactions this handle has committed."""
        return self._write_count

    # --- transactions ---------------------------------------------------------------------

    def _wrap(self, fn: Any, *args: Any) -> Any:
        """Run ``fn``, translating driver errors into ``StoreError`` (cause kept)."""
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc

    def _commit(self, conn: sqlite3.Connection, cursor: sqlite3.Cursor | None = None) -> None:
        try:
            (cursor or conn).execute("COMMIT")  # the write cursor: no new cursor per commit
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"SQLite store {self.path}: commit failed: {exc}") from exc
        self._write_count = next(self._writes) + 1

    def _in_txn(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(txn, ...)`` inside ``BEGIN IMMEDIATE``; commit, or roll back and raise.

        ``KeptRefusal`` commits and raises its refusal; driver errors become ``StoreError``.
        (Written out rather than as a context manager: this is every write's hot path.)
        """
        try:
            conn, cursor = self._thread_handles()
            cursor.execute("BEGIN IMMEDIATE")
            txn = _Txn(conn, self._queries, self._clock(), cursor)
            try:
                result = fn(txn, *args, **kwargs)
            except KeptRefusal as kept:
                self._commit(conn, cursor)
                raise kept.refusal from None
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._commit(conn, cursor)
            return result
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc

    dialect: Final = "sqlite"
    schema: Final[str | None] = None  # SQLite has no schemas (the protocol's Postgres schema)

    def execute_on(
        self, conn: sqlite3.Connection, name: str, params: Mapping[str, Any]
    ) -> tuple[int, list[Any]]:
        """Named query ``name`` on the caller's own connection, inside the caller's
        transaction: its row count and its rows (as mappings). ``InvalidArgument`` for a
        connection that would commit the statement on its own (autocommit, none open). A
        ``now`` of None is stamped with this store's clock."""
        if conn.isolation_level is None and not conn.in_transaction:
            raise InvalidArgument(
                "the connection is in autocommit mode with no open transaction: BEGIN first,"
                " so the message commits together with your own writes"
            )
        # bound as this store binds: instants as its text, "now" its clock's reading (SQLite
        # has no server clock to stamp with)
        bound = {k: encode_instant(v) if isinstance(v, datetime) else v for k, v in params.items()}
        if bound.get("now", "") is None:
            bound["now"] = encode_instant(self._clock())
        cursor = conn.execute(self._queries[name], bound)
        rows = cursor.fetchall() if cursor.description else []
        if rows and not hasattr(rows[0], "keys"):
            columns = [c[0] for c in cursor.description]
            rows = [dict(zip(columns, row, strict=True)) for row in rows]
        return int(cursor.rowcount), rows

    def _write(self, work: Callable[[Any], T], operation: str) -> T:
        """``work(txn)`` in one ``BEGIN IMMEDIATE`` transaction (``_in_txn``)."""
        result: T = self._in_txn(work)
        return result

    def read(self, work: Callable[[Txn], T]) -> T:
        """Run ``work(txn)`` outside any write transaction (it must only read)."""
        txn = _Txn(self._connection(), self._queries, self._clock())
        result: T = self._wrap(work, txn)
        return result

    @staticmethod
    def _read_ts(value: Any) -> datetime:
        return _stored_instant(value)

    def _rows(self, query: str, params: Mapping[str, Any] | None = None) -> list[sqlite3.Row]:
        rows: list[sqlite3.Row] = self._wrap(
            lambda: self._connection().execute(self._queries[query], params or {}).fetchall()
        )
        return rows

    # --- migrations -----------------------------------------------------------------------

    def _migrate(self) -> None:
        conn = self._connection()
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"SQLite store {self.path}: could not switch to WAL (got {mode})")
        migrate_forward(SQLiteHistory(conn, str(self.path)), migration_files("sqlite"), __version__)

    def _check_current(self) -> None:
        known = [migration_id for migration_id, _ in migration_files("sqlite")]
        check_current(SQLiteHistory(self._connection(), str(self.path)), known, __version__)


class SQLiteHistory:
    """``schema_version`` in one file, for ``store.migrate`` (the shared runner)."""

    def __init__(self, conn: sqlite3.Connection, where: str) -> None:
        self.conn, self.where = conn, where

    def applied(self) -> tuple[str, ...]:
        exists = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if exists is None:
            return ()
        rows = self.conn.execute("SELECT migration_id FROM schema_version ORDER BY migration_id")
        return tuple(row[0] for row in rows)

    def foreign_tables(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
        return sorted(row[0] for row in rows)

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.conn.execute("BEGIN IMMEDIATE")  # the write lock: one migrator at a time
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def apply(self, migration_id: str, sql: str) -> None:
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (migration_id TEXT PRIMARY KEY,"
            " applied_at TEXT NOT NULL, ctrlrun_version TEXT NOT NULL)"
        )
        for statement in split_statements(sql):
            self.conn.execute(statement)
        self.conn.execute(
            "INSERT INTO schema_version (migration_id, applied_at, ctrlrun_version)"
            " VALUES (?, ?, ?)",
            (migration_id, encode_instant(utc_now()), __version__),
        )

    def raced(self, error: BaseException) -> bool:
        return False  # BEGIN IMMEDIATE serialises even the first start


def split_statements(sql: str) -> Iterator[str]:
    """The complete statements in a migration file, comments and blank lines dropped."""
    buffer: list[str] = []
    for line in sql.splitlines():
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer.append(line)
        candidate = "\n".join(buffer)
        if sqlite3.complete_statement(candidate):
            yield candidate
            buffer = []
    if any(line.strip() and not line.lstrip().startswith("--") for line in buffer):
        raise ValueError(f"incomplete statement at the end of a migration: {buffer!r}")


def refuse_absent(path: Path) -> None:
    """``StoreNotFound`` unless ``path`` is a non-empty file (a store that may be migrated)."""
    if not path.is_file() or path.stat().st_size == 0:
        state = "is empty" if path.is_file() else "does not exist"
        raise StoreNotFound(
            f"no ctrlrun store: {path} {state}. Create it with `ctrlrun init` (or"
            " Control.from_file(create=True)); a store is never created implicitly, so a"
            " deleted store cannot silently run again what already ran",
            location=str(path),
        )


def _stored_instant(value: Any) -> datetime:
    """A timestamp column (ISO-8601 text, as ``encode_instant`` writes it); ``StoreError`` for
    anything else (a BLOB, a number, garbage written behind the store's back)."""
    try:
        return decode_instant(value)
    except (TypeError, ValueError) as exc:
        shown = f"a BLOB of {len(value)} bytes" if isinstance(value, bytes) else repr(value)[:40]
        raise StoreError(
            f"a timestamp column holds {shown}: the store was altered or damaged",
            unreadable="timestamp",
        ) from exc
