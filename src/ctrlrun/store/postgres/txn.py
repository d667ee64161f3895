"""The ``Txn`` a Postgres write (or read) runs in.

* ``now`` is the server's ``now()`` (lease time is the database's time), read when first
  asked for — in the same message as the deferred ``BEGIN`` when it is the first statement —
  unless the store was given a clock.
* Statements whose row count nobody needs (``run_many``, ``run_later``) are bound on the client
  and sent in the same simple-query round trip as the next statement, or as the COMMIT. A
  failure among them is still reported before the COMMIT takes effect: the server skips the
  rest of the message, COMMIT included, and leaves the transaction open and failed.
* Every effect write is stamped with this transaction's random ``write_token``, and every
  write a re-read can recognise is recorded in ``witness`` (see ``witness``).
* ``connection`` hands the driver connection to a caller's own SQL (a durable database
  step): the queued statements are sent first, so the caller's statements follow everything
  the transaction did before them, and what it writes commits or rolls back with the rest.
* A folded transaction (``defer_begin``) sends nothing at ``BEGIN``: ``BEGIN`` travels with
  its first statement, or with the COMMIT (``folded``). Its folded statements stamp the
  transaction's time on the server (``now_param`` is None) unless the store was given a
  clock; ``fold_later`` queues one statement that makes one or more witnessed writes (a
  call to one of the schema's functions) and keeps its rows, read when it is sent
  (``returned``). A reservation that meets its key answers with the record instead of
  writing (``met``).
* Queued statements are bound on the client — each ``%(name)s`` replaced by the SQL literal
  psycopg writes for its value (``Transformer.as_literal``, what ``ClientCursor.mogrify`` does,
  without a cursor and a query parse per statement) — and go out as one simple-query message
  through the transaction's cursor (``_send``), one result per statement, read with
  ``nextset``.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import abc, adapt

from ctrlrun.kernel.receipt import StoredReceipt
from ctrlrun.store.postgres.connections import Connection
from ctrlrun.store.postgres.witness import DEFERRABLE, EFFECT_WRITES, Witness

Row = dict[str, Any]
_EVENTS_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_NUL = "\x00"
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


class PgTxn:
    """One write transaction (or one read) on one connection. See the module docstring."""

    __slots__ = (
        "_conn",
        "_cursor",
        "_now",
        "_now_source",
        "_pending",
        "_queries",
        "_schema",
        "_tx",
        "_wanted",
        "partitions",
        "returned",
        "witness",
        "write_token",
    )

    def __init__(
        self,
        conn: Connection,
        queries: Mapping[str, str],
        *,
        schema: str,
        now: datetime | None = None,
        now_source: Callable[[], datetime] | None = None,
        partitions: int = 1,
    ) -> None:
        self._conn = conn
        self.partitions = partitions  # the store's receipt chains: a receipt picks one
        self._schema = schema
        self._queries = queries
        self._cursor: psycopg.Cursor[Row] | None = None
        self._tx: abc.Transformer | None = None
        self._pending: list[str] = []
        self._wanted: dict[int, str] = {}
        self.returned: dict[str, list[Row]] = {}
        self._now = now
        self._now_source = now_source
        self.witness = Witness()
        self.write_token = secrets.token_hex(16)

    # --- the Txn protocol ----------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The transaction's clock reading (see the module docstring)."""
        if self._now is None:
            if self._pending and "clock_now" in self._wanted.values():
                self._flush()  # BEGIN has not gone yet: send it, and the clock with it
            rows = self.returned.get("clock_now")
            if rows:
                self._now = self.read_ts(rows[0]["now"])
            else:
                source = self._now_source or self._server_now
                self._now = source()
        return self._now

    def one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        self._execute(query, params)
        return self._cur.fetchone()

    def all(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        self._execute(query, params)
        return self._cur.fetchall()

    def run(self, query: str, params: Mapping[str, Any]) -> int:
        bound = self._stamp(query, params)
        self._execute(query, bound)
        count = self._cur.rowcount
        self.witness.saw(query, bound, count)
        return count

    def run_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> None:
        for one in params:
            self.run_later(query, one)

    def insert_event_rows(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """See ``Txn.insert_event_rows``: one ``events_append`` call (a function of the schema)
        per run of rows stamped with one instant, queued for the COMMIT."""
        for ts, group in itertools.groupby(rows, key=lambda row: row[0]):
            events = [list(row[1:]) for row in group]
            self.run_later("events_append", {"now": ts, "events": _EVENTS_JSON(events)})

    def link_receipt(self, draft: Mapping[str, Any]) -> StoredReceipt:
        """The chained receipt ``draft``, linked to the locked head and hashed on the server
        (``receipt_link``): the shared path's receipt, through the same function as the
        folded ones, so no role needs a write on the receipts or the head. Sent at once (the
        caller needs the seq and hash); witnessed as the folded receipt is."""
        from ctrlrun.store.postgres.folded import RECEIPT, receipt_write

        (name, prefix, params), pending = receipt_write(self, draft)
        row = self.one("receipt_link", {prefix + key: value for key, value in params.items()})
        if row is None:  # the function raises rather than return nothing; defensive
            raise AssertionError("receipt_link returned no row")
        self.witness.saw(name, params, 1)
        assert name == RECEIPT
        return StoredReceipt(
            int(row["seq"]),
            pending.receipt_id,
            row["document"],
            row["hash"],
            partition=pending.partition,
        )

    def run_later(self, query: str, params: Mapping[str, Any]) -> None:
        """Queue ``query``; it travels with the next statement or the COMMIT. Only for
        statements that either change exactly what they say or fail the transaction."""
        if query in EFFECT_WRITES and query not in DEFERRABLE:
            raise AssertionError(f"{query} needs its row count checked; it cannot be deferred")
        bound = self._stamp(query, params)
        self._pending.append(self._bind(query, bound))
        self.witness.saw(query, bound, 1)

    def run_rows_later(self, query: str, row: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Queue one multi-row insert: ``query`` (ending in ``VALUES``) followed by ``row``
        bound to each row's parameters. For plain inserts only (no effect writes)."""
        if query in EFFECT_WRITES or row in EFFECT_WRITES:
            raise AssertionError(f"{row} cannot be folded into a multi-row insert")
        bound: list[str] = []
        for params in rows:
            stamped = self._stamp(row, params)
            bound.append(self._bind(row, stamped))
            self.witness.saw(row, stamped, 1)
        if bound:
            self._pending.append(self._queries[query] + "\n" + ",\n".join(bound))

    def fold_later(
        self, query: str, writes: Sequence[tuple[str, str, Mapping[str, Any]]], *, keep_as: str
    ) -> None:
        """Queue ``query``, one statement that makes several writes, and keep its rows in
        ``returned[keep_as]`` once it is sent. Each write is ``(name, prefix, params)``:
        stamped and witnessed exactly as the named write queued alone would be, and bound
        under ``prefix`` + each parameter's name. Only for writes that either change exactly
        what they say or fail the transaction (see ``run_later``)."""
        bound: dict[str, Any] = {}
        for name, prefix, params in writes:
            if name in EFFECT_WRITES and name not in DEFERRABLE:
                raise AssertionError(f"{name} needs its row count checked; it cannot be deferred")
            stamped = self._stamp(name, params)
            self.witness.saw(name, stamped, 1)
            bound.update(
                {prefix + key: value for key, value in stamped.items()} if prefix else stamped
            )
        self._wanted[len(self._pending)] = keep_as
        self._pending.append(self._bind(query, bound))

    def met(self) -> str | None:
        """What a folded guarded write met instead of writing, as its statement answered
        (the ``met`` column: the record as JSON, or '' when it was gone again), or None when
        none did. Such a write wrote nothing, so its COMMIT ended an empty transaction."""
        for rows in self.returned.values():
            if rows and rows[0].get("met") is not None:
                return str(rows[0]["met"])
        return None

    def fix_now(self, value: Any) -> datetime:
        """Adopt the server's reading of the transaction's time (a folded statement's)."""
        if self._now is None:
            self._now = self.read_ts(value)
        return self._now

    @property
    def now_param(self) -> datetime | None:
        """The ``now`` a folded statement binds: the store's clock reading, or None for the
        server's ``now()``. Never reads the server."""
        return self._now if self._now_source is None else None

    def ts(self, value: datetime | None) -> datetime | None:
        return value

    @property
    def connection(self) -> Connection:
        """The psycopg connection this transaction runs on (autocommit, inside an explicit
        ``BEGIN``; rows as dicts), after sending every queued statement. Write through it with
        tables named in ``schema``; never commit, roll back or close it."""
        self._flush()
        self._tx = None  # the caller may change the session (its encoding): adapt afresh
        return self._conn

    @property
    def schema(self) -> str:
        """The store's schema: name every table with it (``psycopg.sql.Identifier``)."""
        return self._schema

    @staticmethod
    def read_ts(value: Any) -> datetime:
        if not isinstance(value, datetime):
            raise TypeError(f"expected a timestamptz, got {value!r}")
        return value.astimezone(UTC)

    # --- used by the engine --------------------------------------------------------------

    def lean(self) -> None:
        """Drop what ``defer_begin`` queued beyond ``BEGIN`` (the search path, the clock read)
        when nothing has been sent yet: for folded work, whose statements name their schema
        and stamp the server's time themselves."""
        if self._pending[:1] == [self._queries["txn_open"]] and len(self._pending) <= 3:
            self._pending = self._pending[:1]
            self._wanted = {}

    def defer_begin(self) -> None:
        """Open the transaction lazily: ``BEGIN`` is queued, and sent with the first
        statement or the COMMIT. Without a clock, the server's ``now()`` is queued with it, so
        the first statement brings the transaction's time back at no extra round trip."""
        self._pending.extend((self._queries["txn_open"], self._queries["txn_search_path"]))
        if self._now is None and self._now_source is None:
            self._wanted[len(self._pending)] = "clock_now"
            self._pending.append(self._queries["clock_now"])

    def commit(self) -> str | None:
        """Send the queued statements and ``COMMIT`` in one message; return COMMIT's tag
        (``"COMMIT"``, or ``"ROLLBACK"`` if the server had already failed the transaction)."""
        statements, self._pending = [*self._pending, "COMMIT"], []
        self._send(statements)
        return self._cur.statusmessage

    # --- helpers -------------------------------------------------------------------------

    @property
    def _cur(self) -> psycopg.Cursor[Row]:
        """The cursor of the statements whose results are read through it (made when first
        needed: a folded transaction never needs one)."""
        if self._cursor is None:
            self._cursor = self._conn.cursor()
        return self._cursor

    def _flush(self) -> None:
        if self._pending:
            statements, self._pending = self._pending, []
            self._send(statements)

    def _execute(self, query: str, params: Mapping[str, Any]) -> None:
        if not self._pending:
            self._cur.execute(self._queries[query], params)
            return
        statements = [*self._pending, self._bind(query, params)]
        self._pending = []
        self._send(statements)  # the result that matters is the last one

    def _send(self, statements: list[str]) -> None:
        """One simple-query message; one result per statement, in order. The rows of every
        statement queued by ``fold_later`` are kept; the cursor ends on the last result."""
        wanted, self._wanted = self._wanted, {}
        self._cur.execute("; ".join(statements))
        index = 0
        while True:
            if index in wanted:
                self.returned[wanted[index]] = self._cur.fetchall()
            if not self._cur.nextset():
                return
            index += 1

    def _bind(self, query: str, params: Mapping[str, Any]) -> str:
        return self._bind_text(self._queries[query], params)

    def _bind_text(self, text: str, params: Mapping[str, Any]) -> str:
        """``text`` with each ``%(name)s`` replaced by its parameter as an SQL literal, written
        by psycopg exactly as ``ClientCursor.mogrify`` writes it (``as_literal``; None as
        ``NULL``), with one ``Transformer`` for the transaction, which keeps the dumper it
        found for each type."""
        # ~75 µs less client CPU per protected call than mogrify (bench/pg_call_cpu.py)
        if self._tx is None:
            self._tx = adapt.Transformer(self._conn)
        tx, (parts, names) = self._tx, _template(text)
        encoding = tx.encoding
        out = [parts[0]]
        for name, part in zip(names, parts[1:], strict=True):
            value = params[name]
            out.append("NULL" if value is None else tx.as_literal(value).decode(encoding))
            out.append(part)
        return "".join(out)

    def _stamp(self, query: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """The parameters as written: effect writes carry this transaction's token; an error
        text keeps a NUL visible (``\\x00``) because Postgres text cannot hold one, and an
        outcome must never fail to be recorded over its error message."""
        error = params.get("error")
        if query not in EFFECT_WRITES and not (isinstance(error, str) and _NUL in error):
            return params
        stamped = dict(params)
        if query in EFFECT_WRITES:
            stamped["write_token"] = self.write_token
        if isinstance(error, str):
            stamped["error"] = error.replace(_NUL, "\\x00")
        return stamped

    def _server_now(self) -> datetime:
        self._execute("clock_now", {})  # after a deferred BEGIN: inside the transaction
        row = self._cur.fetchone()
        assert row is not None
        return self.read_ts(row["now"])


@functools.lru_cache(maxsize=512)  # a few named queries per store schema
def _template(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``text`` split at its ``%(name)s`` placeholders: the text around them (``%%`` read as
    ``%``, as psycopg reads it) and their names, in order. Any other ``%`` is refused."""
    pieces = _PLACEHOLDER.split(text)
    parts, names = pieces[0::2], pieces[1::2]
    for part in parts:
        if "%" in part.replace("%%", ""):
            raise ValueError(f"a % that is neither %(name)s nor %% in {text!r}")
    return tuple(part.replace("%%", "%") for part in parts), tuple(names)
