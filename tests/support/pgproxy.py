"""A protocol-aware fault-injection TCP proxy in front of a Postgres server.

``PgProxy(upstream_url)`` listens on 127.0.0.1 (ephemeral port) and relays each client connection
to the server named by ``upstream_url`` (a Unix socket ``<host>/.s.PGSQL.<port>`` when the host is
a directory, else TCP). Both directions are *framed* (``support.pgwire``), so decisions are taken
on whole messages, never by grepping bytes:

* a statement is a COMMIT when its SQL text, in a simple Query or in a Parse, is one
  (``support.pgwire.is_commit``); Bind parameters are never inspected. The commit *happens* at
  the Query, or at the Execute of a portal bound to such a parsed statement (pipeline mode);
  that is where ``commits_seen`` counts and where the cuts act.
* the reply to a COMMIT is the first backend message in the COMMIT's Sync/Query group that is a
  CommandComplete ``COMMIT``/``ROLLBACK``, an ErrorResponse, or the group's ReadyForQuery
  (``last_cut_reply`` says which: ``"COMMIT"``, ``"ROLLBACK"``, ``"ERROR <sqlstate>"``,
  ``"READY"``).

Faults (armed from the test thread; thread-safe):

* ``cut_after_commit(times=1, on_cut=None)``: forward the COMMIT, wait for the server's reply to
  reach the proxy, run ``on_cut()`` on the proxy thread, then close the client WITHOUT relaying the
  reply, and close the upstream. The write landed; the client was not told.
* ``cut_before_commit(times=1)``: swallow the COMMIT; close the upstream's write side and wait
  (bounded) for the server to close its end (the backend has then exited, so its transaction is
  rolled back and its locks are released), then close the client.
* ``refuse_connections(True)``: accept and immediately close new connections.
* ``hold(predicate)`` / ``wait_held(timeout)`` / ``release()``: hold one statement whose SQL text
  matches, on whichever connection sends it first; nothing more is forwarded from that connection
  until ``release()``; other connections proceed. Arming over a pending hold raises.

Counters are updated before the client can observe the fault. Every wait is bounded; a fault that
cannot complete (or an ``on_cut``/predicate that raises) is recorded in ``errors`` and makes
``close()`` raise ``ProxyError``, so a silent injector cannot produce a vacuous pass.

The proxy is blind under TLS by design: its ``url`` sets ``sslmode=disable`` and
``gssencmode=disable``, tests must connect that way, and ``tls_sessions`` counts any connection
that negotiated encryption anyway (such a connection is relayed opaquely; no fault applies).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from .pg import replace_url
from .pgwire import (
    CANCEL_REQUEST,
    GSSENC_REQUEST,
    SSL_REQUEST,
    Frame,
    FrameParser,
    cstrings,
    is_commit,
)

JOIN_TIMEOUT = 5.0


class ProxyError(RuntimeError):
    """The proxy was misused, or a fault could not be injected as armed."""


def _shutdown(sock: socket.socket | None, how: int = socket.SHUT_RDWR) -> None:
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(how)


class _Conn:
    """One relayed client connection: a client→server thread and a server→client thread."""

    def __init__(self, proxy: PgProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: socket.socket | None = None
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.live_threads = 0
        self.stmts: dict[str, str] = {}
        self.portals: dict[str, str] = {}
        # Reply groups: the startup message, then each Query and each Sync, ends with exactly one
        # ReadyForQuery, so the n-th group sent is answered after n ReadyForQuery received.
        self.groups_sent = 0
        self.groups_done = 0
        self.cut_after_group: int | None = None
        self.on_cut: Callable[[], None] | None = None
        self.cutting_before = False
        self.cut_done = threading.Event()

    # -- thread plumbing -------------------------------------------------------------------

    def spawn(self, target: Callable[[], None], name: str) -> None:
        def run() -> None:
            try:
                target()
            except OSError:
                pass  # a peer went away: end this connection
            except Exception as exc:
                self.proxy._record(f"{name}: {exc!r}")
            finally:
                self.abort()
                with self.lock:
                    self.live_threads -= 1
                    last = self.live_threads == 0
                if last:
                    self.client.close()
                    if self.upstream is not None:
                        self.upstream.close()

        with self.lock:
            self.live_threads += 1
        thread = threading.Thread(target=run, name=f"pgproxy-{name}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def abort(self) -> None:
        """Wake every thread of this connection (sockets are closed by the last one out)."""
        _shutdown(self.client)
        _shutdown(self.upstream)

    # -- client → server -------------------------------------------------------------------

    def client_loop(self) -> None:
        self.upstream = self.proxy._connect_upstream()
        parser = FrameParser()
        while True:  # startup phase: untyped messages
            frame = self._read(self.client, parser, untyped=True)
            if frame is None:
                return
            self.upstream.sendall(frame.raw)
            if frame.code in (SSL_REQUEST, GSSENC_REQUEST):
                reply = self.upstream.recv(1)
                if not reply:
                    return
                self.client.sendall(reply)
                if reply in (b"S", b"G"):
                    self.proxy._count("tls_sessions")
                    return self._blind(parser)
                continue
            if frame.code == CANCEL_REQUEST:
                return self._blind(parser)
            self.groups_sent = 1  # the startup message: answered by the first ReadyForQuery
            break
        self.spawn(self.server_loop, "s2c")
        while True:
            frame = self._read(self.client, parser)
            if frame is None:
                _shutdown(self.upstream, socket.SHUT_WR)
                return
            if not self._on_client_message(frame):
                return

    def _on_client_message(self, frame: Frame) -> bool:
        """Forward one frontend message, injecting faults; False ends the client loop."""
        assert self.upstream is not None
        text: str | None = None
        commit = False
        kind = frame.type
        if kind == b"Q":
            text = cstrings(frame.body, 1)[0]
            commit = is_commit(text)
        elif kind == b"P":
            name, text = cstrings(frame.body, 2)
            self.stmts[name] = text
        elif kind == b"B":
            portal, name = cstrings(frame.body, 2)
            self.portals[portal] = self.stmts.get(name, "")
            if name:  # a named statement executed again without a Parse
                text = self.portals[portal]
        elif kind == b"E":
            commit = is_commit(self.portals.get(cstrings(frame.body, 1)[0], ""))
        if text is not None and not self.proxy._maybe_hold(text):
            return False
        if commit:
            decision, on_cut = self.proxy._on_commit()
            if decision == "before":
                return self._cut_before()
            if decision == "after":
                with self.lock:
                    self.cut_after_group = self.groups_sent
                    self.on_cut = on_cut
        self.upstream.sendall(frame.raw)
        if kind in (b"Q", b"S"):
            self.groups_sent += 1
        return True

    def _cut_before(self) -> bool:
        with self.lock:
            self.cutting_before = True
        _shutdown(self.upstream, socket.SHUT_WR)  # the backend reads EOF, rolls back, exits
        if not self.cut_done.wait(self.proxy.cut_timeout):
            self.proxy._record("cut_before_commit: the server did not close its end in time")
        return False

    # -- server → client -------------------------------------------------------------------

    def server_loop(self) -> None:
        assert self.upstream is not None
        parser = FrameParser()
        while True:
            try:
                data = self.upstream.recv(65536)
            except OSError:
                data = b""  # a reset is an end too (and must still finish a cut_before)
            if not data:
                break
            parser.feed(data)
            out = bytearray()
            while (frame := parser.next_frame()) is not None:
                if self.cutting_before:
                    continue  # nothing more reaches the client
                reply = self._commit_reply(frame)
                if reply is not None:
                    if out:
                        self.client.sendall(out)
                    self._cut_after(reply)
                    return
                if frame.type == b"Z":
                    self.groups_done += 1
                out += frame.raw
            if out:
                self.client.sendall(out)
        if self.cutting_before:  # the backend has exited: now the client may learn
            self.proxy._count("cuts_before_commit")
            _shutdown(self.client)
            self.cut_done.set()

    def _commit_reply(self, frame: Frame) -> str | None:
        with self.lock:
            group = self.cut_after_group
        if group is None or self.groups_done != group:
            return None
        if frame.type == b"C":
            tag = cstrings(frame.body, 1)[0].split(" ")[0].upper()
            return tag if tag in ("COMMIT", "ROLLBACK") else None
        if frame.type == b"E":
            fields = {f[:1]: f[1:] for f in frame.body.split(b"\0") if f}
            return "ERROR " + fields.get(b"C", b"?????").decode("ascii", errors="replace")
        if frame.type == b"Z":
            return "READY"
        return None

    def _cut_after(self, reply: str) -> None:
        if self.on_cut is not None:
            try:
                self.on_cut()
            except Exception as exc:
                self.proxy._record(f"on_cut raised {exc!r}")
        self.proxy._count("cuts_after_commit", last_cut_reply=reply)
        _shutdown(self.client)
        _shutdown(self.upstream)

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _read(sock: socket.socket, parser: FrameParser, *, untyped: bool = False) -> Frame | None:
        while (frame := parser.next_frame(untyped=untyped)) is None:
            data = sock.recv(65536)
            if not data:
                return None
            parser.feed(data)
        return frame

    def _blind(self, parser: FrameParser) -> None:
        """Relay opaquely in both directions (after TLS/GSS was negotiated, or a cancel)."""
        assert self.upstream is not None
        upstream = self.upstream
        rest = parser.take_rest()
        if rest:
            upstream.sendall(rest)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            while data := src.recv(65536):
                dst.sendall(data)
            _shutdown(dst, socket.SHUT_WR)

        self.spawn(lambda: pump(upstream, self.client), "s2c-raw")
        pump(self.client, upstream)


class PgProxy:
    """The fault proxy; see the module docstring for the contract. Use as a context manager or
    call ``close()``; ``url`` is a libpq URL that reaches ``upstream_url`` through the proxy."""

    def __init__(
        self,
        upstream_url: str,
        *,
        cut_timeout: float = 10.0,
        hold_timeout: float = 60.0,
    ) -> None:
        parts = conninfo_to_dict(upstream_url)
        host = str(parts.get("host") or "/tmp").split(",")[0]
        port = int(str(parts.get("port") or 5432).split(",")[0])
        self.upstream_url = upstream_url
        self._upstream_addr: tuple[socket.AddressFamily, Any] = (
            (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
            if host.startswith("/")
            else (socket.AF_INET, (host, port))
        )
        self.cut_timeout = cut_timeout
        self.hold_timeout = hold_timeout
        self._lock = threading.Lock()
        # counters: plain ints, written under the lock, read freely (an int read is atomic)
        self.connections = 0  # client connections relayed (refused ones are not counted)
        self.commits_seen = 0  # COMMITs the clients had executed or swallowed
        self.cuts_after_commit = 0
        self.cuts_before_commit = 0
        self.refused = 0  # connections accepted and closed at once
        self.holds = 0  # statements held
        self.tls_sessions = 0  # connections that negotiated TLS/GSS (relayed opaquely)
        self.last_cut_reply: str | None = None
        self.errors: list[str] = []
        self._after_left = 0
        self._before_left = 0
        self._on_cut: Callable[[], None] | None = None
        self._refusing = False
        self._hold_predicate: Callable[[str], bool] | None = None
        self._held_sql: str | None = None
        self._held_event = threading.Event()
        self._release_event = threading.Event()
        self._closed = False
        self._conns: list[_Conn] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.host = "127.0.0.1"
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = os.pipe()
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="pgproxy-accept", daemon=True
        )
        self._acceptor.start()

    # -- addresses -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The upstream URL (same user, database, options) re-pointed at the proxy, no TLS/GSS."""
        return self.url_for()

    def url_for(self, **changes: str | None) -> str:
        """Like ``url`` with other libpq parameters changed (e.g. ``user=``, ``dbname=``)."""
        return replace_url(
            self.upstream_url,
            host=self.host,
            port=str(self.port),
            sslmode="disable",
            gssencmode="disable",
            **changes,
        )

    # -- arming ----------------------------------------------------------------------------

    def cut_after_commit(self, times: int = 1, on_cut: Callable[[], None] | None = None) -> None:
        """Cut the client after each of the next ``times`` COMMITs landed (0 disarms)."""
        with self._lock:
            if times and self._before_left:
                raise ProxyError("cut_before_commit is still armed")
            self._after_left = times
            self._on_cut = on_cut

    def cut_before_commit(self, times: int = 1) -> None:
        """Swallow each of the next ``times`` COMMITs and cut both sides (0 disarms)."""
        with self._lock:
            if times and self._after_left:
                raise ProxyError("cut_after_commit is still armed")
            self._before_left = times

    def refuse_connections(self, refuse: bool = True) -> None:
        """While on, accept and immediately close every new connection."""
        with self._lock:
            self._refusing = refuse

    def hold(self, predicate: Callable[[str], bool]) -> None:
        """Hold the next statement whose SQL text satisfies ``predicate`` (see module doc)."""
        with self._lock:
            if self._hold_predicate is not None or self._held_sql is not None:
                raise ProxyError("a hold is already pending; release() it first")
            self._hold_predicate = predicate
            self._held_event = threading.Event()
            self._release_event = threading.Event()

    def wait_held(self, timeout: float = 10.0) -> str:
        """Block until a statement is held; return its SQL. Raise TimeoutError otherwise."""
        with self._lock:
            event = self._held_event
        if not event.wait(timeout):
            raise TimeoutError(f"no statement was held within {timeout} s")
        with self._lock:
            return self._held_sql or ""

    def release(self) -> bool:
        """Let the held statement go (True), or disarm a hold that never matched (False)."""
        with self._lock:
            self._hold_predicate = None
            held = self._held_sql is not None
            self._held_sql = None
            self._release_event.set()
        return held

    # -- called from connection threads ----------------------------------------------------

    def _count(self, name: str, *, last_cut_reply: str | None = None) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)
            if last_cut_reply is not None:
                self.last_cut_reply = last_cut_reply

    def _record(self, error: str) -> None:
        with self._lock:
            self.errors.append(error)

    def _on_commit(self) -> tuple[str | None, Callable[[], None] | None]:
        with self._lock:
            self.commits_seen += 1
            if self._before_left:
                self._before_left -= 1
                return "before", None
            if self._after_left:
                self._after_left -= 1
                return "after", self._on_cut
            return None, None

    def _maybe_hold(self, sql: str) -> bool:
        """Block while ``sql`` is the held statement; False when the proxy closed meanwhile."""
        with self._lock:
            predicate = self._hold_predicate
        if predicate is None:
            return True
        try:
            matched = predicate(sql)
        except Exception as exc:
            self._record(f"hold predicate raised {exc!r} on {sql!r}")
            return True
        if not matched:
            return True
        with self._lock:
            if self._hold_predicate is not predicate or self._closed:
                return not self._closed  # another connection claimed it first
            self._hold_predicate = None
            self._held_sql = sql
            self.holds += 1
            release = self._release_event
            self._held_event.set()
        if not release.wait(self.hold_timeout):
            self._record(f"held statement never released: {sql!r}")
            with self._lock:
                self._held_sql = None
        with self._lock:
            return not self._closed

    def _connect_upstream(self) -> socket.socket:
        family, address = self._upstream_addr
        if family != socket.AF_UNIX:
            sock = socket.create_connection(address, timeout=self.cut_timeout)
        else:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(self.cut_timeout)
            try:
                sock.connect(address)
            except OSError:
                sock.close()
                raise
        sock.settimeout(None)
        return sock

    def _accept_loop(self) -> None:
        while True:
            ready, _, _ = select.select([self._listener.fileno(), self._wake_r], [], [])
            if self._wake_r in ready:
                return
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue
            with self._lock:
                refusing, closed = self._refusing, self._closed
                if refusing and not closed:
                    self.refused += 1
                elif not closed:
                    self.connections += 1
            if refusing or closed:
                _shutdown(client)
                client.close()
                continue
            conn = _Conn(self, client)
            with self._lock:
                self._conns.append(conn)
            conn.spawn(conn.client_loop, "c2s")

    # -- lifecycle -------------------------------------------------------------------------

    def close(self, *, check: bool = True) -> None:
        """Stop accepting, cut every connection, join every thread (bounded). Then, if
        ``check``, raise ``ProxyError`` if any fault could not be injected as armed."""
        with self._lock:
            already = self._closed
            self._closed = True
            self._release_event.set()
            conns = list(self._conns)
        if not already:
            os.write(self._wake_w, b"x")
            self._acceptor.join(JOIN_TIMEOUT)
            for conn in conns:
                conn.abort()
            for conn in conns:
                i = 0
                while i < len(conn.threads):  # c2s first: it may have spawned s2c meanwhile
                    conn.threads[i].join(JOIN_TIMEOUT)
                    if conn.threads[i].is_alive():
                        self._record(f"{conn.threads[i].name} did not stop")
                    i += 1
            self._listener.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
        if check:
            self.check()

    def check(self) -> None:
        """Raise ``ProxyError`` listing every recorded injector error."""
        with self._lock:
            errors = list(self.errors)
        if errors:
            raise ProxyError("fault proxy errors:\n" + "\n".join(errors))

    def __enter__(self) -> PgProxy:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(check=exc_type is None)
