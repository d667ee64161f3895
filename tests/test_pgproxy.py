"""Self-tests of the fault proxy against the real server: each fault does what it says, and a
statement that only *mentions* COMMIT never triggers one.

Ordering uses events and the proxy's own hooks; every wait is bounded.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

from support.pg_fixtures import PgSchema
from support.pgproxy import PgProxy, ProxyError
from support.pgwire import SSL_REQUEST, Frame, FrameParser, cstrings, message, startup

pytestmark = pytest.mark.postgres

WAIT = 10.0


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def table(pg_schema: PgSchema) -> str:
    """A fresh ``<schema>.effects (k text primary key, v int)``; returns its qualified name."""
    name = f"{pg_schema.schema}.effects"
    with pg_schema.server.connect() as conn:
        conn.execute(f"CREATE TABLE {name} (k text PRIMARY KEY, v int NOT NULL DEFAULT 0)")
    return name


def _rows(pg_schema: PgSchema, table: str) -> dict[str, int]:
    """The table as seen by a fresh direct connection (not through the proxy)."""
    with pg_schema.server.connect() as conn:
        return dict(conn.execute(f"SELECT k, v FROM {table}").fetchall())


@pytest.fixture
def via_proxy(pg_proxy: PgProxy) -> Iterator[list[psycopg.Connection[Any]]]:
    """Connections made through the proxy are collected here and closed at teardown."""
    conns: list[psycopg.Connection[Any]] = []
    yield conns
    for conn in conns:
        conn.close()


def _connect(proxy: PgProxy, conns: list[psycopg.Connection[Any]]) -> psycopg.Connection[Any]:
    conn = psycopg.connect(proxy.url, autocommit=True, connect_timeout=WAIT)
    conns.append(conn)
    return conn


class Cut(ConnectionError):
    """The connection ended before ReadyForQuery; ``frames`` is what did arrive."""

    def __init__(self, frames: list[Frame]) -> None:
        super().__init__(f"closed after {[f.type for f in frames]}")
        self.frames = frames


class RawClient:
    """A hand-written protocol client, so a test knows exactly which messages are sent."""

    def __init__(
        self, proxy: PgProxy, *, byte_at_a_time: bool = False, ssl_request: bool = False
    ) -> None:
        self.sock = socket.create_connection((proxy.host, proxy.port), timeout=WAIT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.byte_at_a_time = byte_at_a_time
        self.parser = FrameParser()
        if ssl_request:  # ask for TLS first; the test server says no ('N'), as libpq allows
            self.send(startup(SSL_REQUEST))
            assert self.sock.recv(1) == b"N"
        self.send(startup(196608, b"user\0postgres\0database\0postgres\0\0"))
        assert self.until_ready()[-1].type == b"Z"

    def send(self, data: bytes) -> None:
        if self.byte_at_a_time:
            for i in range(len(data)):
                self.sock.sendall(data[i : i + 1])
        else:
            self.sock.sendall(data)

    def until_ready(self) -> list[Frame]:
        """Backend messages up to ReadyForQuery; ConnectionError if the connection ends first."""
        frames: list[Frame] = []
        while True:
            frame = self.parser.next_frame()
            if frame is None:
                data = self.sock.recv(65536)
                if not data:
                    raise Cut(frames)
                self.parser.feed(data)
                continue
            frames.append(frame)
            if frame.type == b"Z":
                return frames

    def query(self, text: str) -> list[Frame]:
        self.send(message(b"Q", text.encode() + b"\0"))
        return self.until_ready()

    def extended(self, text: str, *params: str) -> list[Frame]:
        return self.extended_group([(text, params)])

    def extended_group(self, statements: list[tuple[str, tuple[str, ...]]]) -> list[Frame]:
        """Parse/Bind/Execute each statement (unnamed), then one Sync for them all."""
        out = b""
        for text, params in statements:
            bind = b"\0\0" + struct.pack("!hh", 0, len(params))
            for p in params:
                bind += struct.pack("!i", len(p.encode())) + p.encode()
            bind += struct.pack("!h", 0)
            out += message(b"P", b"\0" + text.encode() + b"\0\0\0")
            out += message(b"B", bind) + message(b"E", b"\0\0\0\0\0")
        self.send(out + message(b"S", b""))
        return self.until_ready()

    def close(self) -> None:
        self.sock.close()


def _tags(frames: list[Frame]) -> list[str]:
    return [cstrings(f.body, 1)[0] for f in frames if f.type == b"C"]


# --------------------------------------------------------------------------- plain relay


def test_relays_plain_traffic_and_keeps_user_and_database(pg_proxy: PgProxy, via_proxy) -> None:
    assert "sslmode=disable" in pg_proxy.url
    assert "gssencmode=disable" in pg_proxy.url
    conn = _connect(pg_proxy, via_proxy)
    row = conn.execute("SELECT current_user, current_database(), 1 + %s", [1]).fetchone()
    assert row == ("postgres", "postgres", 2)
    assert conn.pgconn.ssl_in_use is False
    assert (pg_proxy.connections, pg_proxy.commits_seen, pg_proxy.tls_sessions) == (1, 0, 0)


# --------------------------------------------------------------------------- cut after commit


def test_cut_after_commit_lands_the_write_and_hides_the_reply(
    pg_proxy: PgProxy, via_proxy, pg_schema: PgSchema, table: str
) -> None:
    events: list[str] = []
    seen_in_window: dict[str, int] = {}

    def on_cut() -> None:
        events.append("on_cut")
        seen_in_window.update(_rows(pg_schema, table))  # the commit has landed already
        with pg_schema.server.connect() as rival:  # somebody else acts in the window
            rival.execute(f"UPDATE {table} SET v = 7 WHERE k = %s", ["refund:COMMIT-me"])

    conn = _connect(pg_proxy, via_proxy)
    pg_proxy.cut_after_commit(on_cut=on_cut)
    conn.execute("BEGIN")
    conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["refund:COMMIT-me"])
    with pytest.raises(psycopg.OperationalError):
        conn.execute("COMMIT")
    events.append("client_error")

    assert events == ["on_cut", "client_error"]
    assert seen_in_window == {"refund:COMMIT-me": 0}
    assert _rows(pg_schema, table) == {"refund:COMMIT-me": 7}
    assert conn.broken
    assert (pg_proxy.commits_seen, pg_proxy.cuts_after_commit) == (1, 1)
    assert pg_proxy.last_cut_reply == "COMMIT"


def test_cut_after_commit_with_a_transaction_block(
    pg_proxy: PgProxy, via_proxy, pg_schema: PgSchema, table: str
) -> None:
    conn = _connect(pg_proxy, via_proxy)
    pg_proxy.cut_after_commit()
    with pytest.raises(psycopg.OperationalError), conn.transaction():
        conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["a"])
    assert _rows(pg_schema, table) == {"a": 0}
    assert pg_proxy.cuts_after_commit == 1


def test_cut_after_commit_in_pipeline_mode_uses_the_extended_protocol(
    pg_proxy: PgProxy, via_proxy, pg_schema: PgSchema, table: str
) -> None:
    conn = _connect(pg_proxy, via_proxy)
    pg_proxy.cut_after_commit()

    def two_inserts() -> None:
        with conn.pipeline(), conn.transaction():
            conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["p1"])
            conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["p2"])

    with pytest.raises(psycopg.OperationalError):
        two_inserts()
    assert _rows(pg_schema, table) == {"p1": 0, "p2": 0}
    assert (pg_proxy.commits_seen, pg_proxy.cuts_after_commit) == (1, 1)
    assert pg_proxy.last_cut_reply == "COMMIT"


def test_cut_after_commit_reports_the_servers_rollback(
    pg_proxy: PgProxy, via_proxy, pg_schema: PgSchema, table: str
) -> None:
    conn = _connect(pg_proxy, via_proxy)
    pg_proxy.cut_after_commit()
    conn.execute("BEGIN")
    conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["dup"])
    with pytest.raises(errors.UniqueViolation):
        conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["dup"])
    with pytest.raises(psycopg.OperationalError):
        conn.execute("COMMIT")  # of an aborted transaction: the server answers ROLLBACK
    assert pg_proxy.last_cut_reply == "ROLLBACK"
    assert _rows(pg_schema, table) == {}


def test_a_client_sending_one_byte_at_a_time_is_cut_on_the_real_commit(
    pg_proxy: PgProxy, pg_schema: PgSchema, table: str
) -> None:
    client = RawClient(pg_proxy, byte_at_a_time=True, ssl_request=True)
    try:
        pg_proxy.cut_after_commit()
        assert _tags(client.query("BEGIN")) == ["BEGIN"]
        assert _tags(client.extended(f"INSERT INTO {table} (k) VALUES ($1)", "slow")) == [
            "INSERT 0 1"
        ]
        with pytest.raises(Cut) as cut:
            client.query("COMMIT")
        assert cut.value.frames == []  # not a byte of the reply reached the client
    finally:
        client.close()
    assert _rows(pg_schema, table) == {"slow": 0}
    assert (pg_proxy.commits_seen, pg_proxy.cuts_after_commit) == (1, 1)


def test_cut_after_commit_relays_what_precedes_the_commit_in_its_group(
    pg_proxy: PgProxy, pg_schema: PgSchema, table: str
) -> None:
    pg_proxy.cut_after_commit(times=2)
    simple = RawClient(pg_proxy)
    try:  # one simple Query holding three statements
        with pytest.raises(Cut) as cut:
            simple.query(f"BEGIN; INSERT INTO {table} (k) VALUES ('s'); COMMIT")
        assert _tags(cut.value.frames) == ["BEGIN", "INSERT 0 1"]
    finally:
        simple.close()
    assert pg_proxy.last_cut_reply == "COMMIT"
    extended = RawClient(pg_proxy)
    try:  # one Sync group: BEGIN, INSERT, COMMIT through Parse/Bind/Execute
        insert = (f"INSERT INTO {table} (k) VALUES ($1)", ("e",))
        with pytest.raises(Cut) as cut:
            extended.extended_group([("BEGIN", ()), insert, ("COMMIT", ())])
        assert _tags(cut.value.frames) == ["BEGIN", "INSERT 0 1"]
    finally:
        extended.close()
    assert pg_proxy.last_cut_reply == "COMMIT"
    assert _rows(pg_schema, table) == {"s": 0, "e": 0}
    assert (pg_proxy.commits_seen, pg_proxy.cuts_after_commit) == (2, 2)


def test_cut_after_commit_waits_for_the_commits_own_group(
    pg_proxy: PgProxy, pg_schema: PgSchema, table: str
) -> None:
    client = RawClient(pg_proxy)
    try:
        client.query("BEGIN")
        client.extended(f"INSERT INTO {table} (k) VALUES ($1)", "g")
        pg_proxy.cut_after_commit()
        # two Query messages in one write: the SELECT's reply (ending in ReadyForQuery) may
        # reach the proxy after the COMMIT was forwarded, and must still be relayed
        client.send(message(b"Q", b"SELECT 41\0") + message(b"Q", b"COMMIT\0"))
        assert _tags(client.until_ready()) == ["SELECT 1"]
        with pytest.raises(Cut) as cut:
            client.until_ready()
        assert cut.value.frames == []
    finally:
        client.close()
    assert pg_proxy.last_cut_reply == "COMMIT"
    assert _rows(pg_schema, table) == {"g": 0}


# --------------------------------------------------------------------------- decoys


def test_commit_inside_parameters_literals_and_names_triggers_nothing(
    pg_proxy: PgProxy, via_proxy, pg_schema: PgSchema, table: str
) -> None:
    client = RawClient(pg_proxy)
    try:
        pg_proxy.cut_after_commit()
        client.query("BEGIN")
        # a Bind parameter (extended protocol), a literal in a simple Query, a literal in a
        # Parse, a quoted identifier, a comment, and a string with a semicolon before COMMIT
        client.extended(f"INSERT INTO {table} (k) VALUES ($1)", "refund:COMMIT-me")
        client.query(f"INSERT INTO {table} (k) VALUES ('COMMIT')")
        client.extended(f"INSERT INTO {table} (k) VALUES ('x; COMMIT')")
        client.query(f'SELECT k AS "COMMIT" FROM {table} -- COMMIT')
        client.query("SELECT 'END'; /* ; COMMIT */ SELECT $$;COMMIT$$")
        assert (pg_proxy.commits_seen, pg_proxy.cuts_after_commit) == (0, 0)
        with pytest.raises(Cut) as cut:
            client.query("commit ;")
        assert cut.value.frames == []
    finally:
        client.close()
    assert _rows(pg_schema, table) == {"refund:COMMIT-me": 0, "COMMIT": 0, "x; COMMIT": 0}
    assert (pg_proxy.commits_seen, pg_proxy.cuts_after_commit) == (1, 1)

    conn = _connect(pg_proxy, via_proxy)  # psycopg's own Bind path, with nothing armed
    with conn.transaction():
        conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["psycopg:COMMIT"])
    assert pg_proxy.commits_seen == 2
    assert "psycopg:COMMIT" in _rows(pg_schema, table)


# --------------------------------------------------------------------------- cut before commit


def test_cut_before_commit_rolls_back_and_releases_the_lock(
    pg_proxy: PgProxy, via_proxy, pg_schema: PgSchema, table: str
) -> None:
    conn = _connect(pg_proxy, via_proxy)
    conn.execute("BEGIN")
    conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["k1"])

    def second_writer() -> None:
        with pg_schema.server.connect() as other:
            other.execute("SET lock_timeout = '200ms'")
            other.execute(f"INSERT INTO {table} (k, v) VALUES (%s, 2)", ["k1"])

    # positive control: while the transaction is open, the second writer IS blocked
    with pytest.raises(errors.LockNotAvailable):
        second_writer()

    pg_proxy.cut_before_commit()
    with pytest.raises(psycopg.OperationalError):
        conn.execute("COMMIT")
    assert (pg_proxy.commits_seen, pg_proxy.cuts_before_commit, pg_proxy.cuts_after_commit) == (
        1,
        1,
        0,
    )
    assert _rows(pg_schema, table) == {}
    second_writer()  # no wait: the lock went with the backend before the client was told
    assert _rows(pg_schema, table) == {"k1": 2}


def test_cut_before_commit_counts_down(
    pg_proxy: PgProxy, via_proxy, pg_schema: PgSchema, table: str
) -> None:
    pg_proxy.cut_before_commit(times=2)
    for key in ("a", "b"):
        conn = _connect(pg_proxy, via_proxy)
        with pytest.raises(psycopg.OperationalError), conn.transaction():
            conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", [key])
    conn = _connect(pg_proxy, via_proxy)
    with conn.transaction():
        conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["c"])
    assert _rows(pg_schema, table) == {"c": 0}
    assert (pg_proxy.commits_seen, pg_proxy.cuts_before_commit) == (3, 2)


def test_the_two_cuts_cannot_be_armed_together(pg_proxy: PgProxy) -> None:
    pg_proxy.cut_before_commit()
    with pytest.raises(ProxyError):
        pg_proxy.cut_after_commit()
    pg_proxy.cut_before_commit(times=0)
    pg_proxy.cut_after_commit()
    with pytest.raises(ProxyError):
        pg_proxy.cut_before_commit()


# --------------------------------------------------------------------------- refusals


def test_refuse_connections_and_restore(pg_proxy: PgProxy, via_proxy) -> None:
    existing = _connect(pg_proxy, via_proxy)
    pg_proxy.refuse_connections(True)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg_proxy.url, connect_timeout=WAIT)
    assert pg_proxy.refused == 1
    assert existing.execute("SELECT 1").fetchone() == (1,)  # only new connections are refused
    pg_proxy.refuse_connections(False)
    assert _connect(pg_proxy, via_proxy).execute("SELECT 2").fetchone() == (2,)
    assert (pg_proxy.connections, pg_proxy.refused) == (2, 1)


# --------------------------------------------------------------------------- holds


def test_hold_blocks_one_connection_while_others_proceed(
    pg_proxy: PgProxy, via_proxy, pg_schema: PgSchema, table: str
) -> None:
    with pg_schema.server.connect() as conn:
        conn.execute(f"INSERT INTO {table} (k) VALUES ('x'), ('y')")
    conn_a = _connect(pg_proxy, via_proxy)
    conn_b = _connect(pg_proxy, via_proxy)
    pg_proxy.hold(lambda text: text.lstrip().upper().startswith("UPDATE"))
    a_done = threading.Event()
    a_errors: list[BaseException] = []

    def run_a() -> None:
        try:
            conn_a.execute(f"UPDATE {table} SET v = v + 1 WHERE k = %s", ["x"])
        except BaseException as exc:
            a_errors.append(exc)
        finally:
            a_done.set()

    thread = threading.Thread(target=run_a, daemon=True)
    thread.start()
    held = pg_proxy.wait_held(WAIT)
    assert held.startswith(f"UPDATE {table}")
    with pytest.raises(ProxyError):
        pg_proxy.hold(lambda text: True)  # refuses to arm over a pending hold

    # B proceeds, with the same kind of statement, while A's UPDATE never reached the server
    conn_b.execute(f"UPDATE {table} SET v = v + 10 WHERE k = %s", ["y"])
    assert _rows(pg_schema, table) == {"x": 0, "y": 10}
    assert not a_done.is_set()

    assert pg_proxy.release() is True
    assert a_done.wait(WAIT)
    thread.join(WAIT)
    assert a_errors == []
    assert _rows(pg_schema, table) == {"x": 1, "y": 10}
    assert pg_proxy.holds == 1


def test_hold_matches_statement_text_never_bind_parameters(pg_proxy: PgProxy, via_proxy) -> None:
    conn = _connect(pg_proxy, via_proxy)
    pg_proxy.hold(lambda text: "secret" in text)
    assert conn.execute("SELECT %s::text", ["secret"]).fetchone() == ("secret",)
    assert pg_proxy.holds == 0
    assert pg_proxy.release() is False  # disarmed: nothing was held
    pg_proxy.hold(lambda text: True)  # and a new hold may be armed
    pg_proxy.release()


def test_hold_catches_a_prepared_statement_executed_without_a_parse(
    pg_proxy: PgProxy, via_proxy
) -> None:
    conn = _connect(pg_proxy, via_proxy)
    query = "SELECT %s::int + 40"
    assert conn.execute(query, [1], prepare=True).fetchone() == (41,)  # Parse + Bind + Execute
    pg_proxy.hold(lambda text: "+ 40" in text)
    result: list[Any] = []
    thread = threading.Thread(
        target=lambda: result.append(conn.execute(query, [2], prepare=True).fetchone()),
        daemon=True,
    )
    thread.start()  # this time only Bind + Execute of the named statement go out
    assert "+ 40" in pg_proxy.wait_held(WAIT)
    assert pg_proxy.release() is True
    thread.join(WAIT)
    assert result == [(42,)]


def test_wait_held_is_bounded(pg_proxy: PgProxy) -> None:
    pg_proxy.hold(lambda text: False)
    with pytest.raises(TimeoutError):
        pg_proxy.wait_held(0.05)
    pg_proxy.release()


def test_a_cancel_request_is_relayed(pg_proxy: PgProxy, via_proxy, pg_server) -> None:
    conn = _connect(pg_proxy, via_proxy)
    (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (0,)
    outcome: list[BaseException] = []

    def sleep() -> None:
        try:
            conn.execute("SELECT pg_sleep(30)")
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=sleep, daemon=True)
    thread.start()
    with pg_server.connect() as watcher:  # bounded poll until the sleep is running
        deadline = time.monotonic() + WAIT
        query = "SELECT state = 'active' FROM pg_stat_activity WHERE pid = %s"
        while watcher.execute(query, [pid]).fetchone() != (True,):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    conn.cancel_safe(timeout=WAIT)  # a CancelRequest on a new connection to the proxy
    thread.join(WAIT)
    assert len(outcome) == 1
    assert isinstance(outcome[0], errors.QueryCanceled)
    assert conn.execute("SELECT 1").fetchone() == (1,)


# --------------------------------------------------------------------------- integrity


def test_an_on_cut_that_raises_fails_close(pg_server, pg_schema: PgSchema, table: str) -> None:
    proxy = PgProxy(pg_server.url)
    try:
        conn = psycopg.connect(proxy.url, autocommit=True, connect_timeout=WAIT)

        def boom() -> None:
            raise RuntimeError("hook failed")

        proxy.cut_after_commit(on_cut=boom)
        with pytest.raises(psycopg.OperationalError), conn.transaction():
            conn.execute(f"INSERT INTO {table} (k) VALUES (%s)", ["z"])
        conn.close()
    finally:
        with pytest.raises(ProxyError, match="hook failed"):
            proxy.close()


def test_the_proxy_url_keeps_other_roles_and_options(pg_server, pg_schema: PgSchema) -> None:
    url = pg_server.url_for(options=f"-c search_path={pg_schema.schema}")
    with PgProxy(url) as proxy, psycopg.connect(proxy.url, connect_timeout=WAIT) as conn:
        assert conn.execute("SHOW search_path").fetchone() == (pg_schema.schema,)
        ident = sql.Identifier(pg_schema.schema)
        conn.execute(sql.SQL("CREATE TABLE {}.p (x int)").format(ident))
