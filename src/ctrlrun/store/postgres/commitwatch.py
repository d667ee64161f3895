"""A COMMIT whose durability the server did not confirm: its warnings, and its time bound.

Under synchronous replication a COMMIT waits for the standbys. Two things end that wait
without confirming it, and both leave the outcome unknown:

* The wait is cancelled (a client's cancel request, ``pg_cancel_backend``, a
  ``statement_timeout``): PostgreSQL then answers the COMMIT **successfully**, with only a
  WARNING ("canceling wait for synchronous replication …: the transaction has already
  committed locally, but might not have been replicated to the standby"). A terminated
  backend sends a WARNING of its own before the connection closes. ``NoticeLog`` collects the
  notices of each connection (``Connection.add_notice_handler``); ``doubt`` names any WARNING
  received while the COMMIT's message ran. Any: a warning there is never expected, and one in
  another language (``lc_messages``) must not slip through, so the text is not matched.
* The wait outlives the store's bound (``commit_timeout``, seconds). ``CommitWatch`` arms a
  deadline around each COMMIT: when it passes, a cancel request is sent (which ends a
  synchronous-replication wait with the warning above); if the COMMIT still has not returned
  ``GRACE`` seconds later (a frozen server answers no cancel), the socket is shut down, so the
  caller gets a lost connection instead of a hang. Either way the attempt is unknown.

The engine (``engine._commit``) treats both as a COMMIT that went unanswered: the connection
is discarded and the re-read decides, confirming a landed write's replication first
(``replication.confirm_replicated``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import psycopg

from ctrlrun.store.postgres.connections import Connection

T = TypeVar("T")

GRACE: Final = 2.0
"""Seconds between the cancel request and shutting the socket of a COMMIT still waiting."""


_KEPT: Final = 32
"""Notices kept per connection between two COMMITs (the oldest are dropped)."""


class Unconfirmed(Exception):
    """The cause of an unknown outcome: the server answered the COMMIT without confirming it
    (a warning) or the COMMIT outlived its bound. Never raised to a caller."""


class NoticeLog:
    """The notices one connection received since it was last ``cleared``."""

    __slots__ = ("notices",)

    def __init__(self) -> None:
        self.notices: list[tuple[str, str, str]] = []

    def __call__(self, diag: psycopg.errors.Diagnostic) -> None:
        severity = diag.severity_nonlocalized or diag.severity or ""
        if len(self.notices) >= _KEPT:  # a connection that never commits must not grow
            del self.notices[0]
        self.notices.append((severity, diag.sqlstate or "", diag.message_primary or ""))

    def clear(self) -> None:
        self.notices.clear()

    def warnings(self) -> list[tuple[str, str, str]]:
        return [n for n in self.notices if n[0] == "WARNING"]


_LOGS: weakref.WeakKeyDictionary[Connection, NoticeLog] = weakref.WeakKeyDictionary()


def listen(conn: Connection) -> None:
    """Collect ``conn``'s notices from now on (called once per new connection)."""
    log = NoticeLog()
    conn.add_notice_handler(log)
    _LOGS[conn] = log


@dataclass(slots=True)
class _Armed:
    conn: Connection
    deadline: float
    # Set once it fires (under the watch's lock), so a COMMIT in time makes no Event:
    # ~20 µs less client CPU per protected call (bench/pg_call_cpu.py, paired runs).
    done: threading.Event | None = None

    @property
    def fired(self) -> bool:
        return self.done is not None


class CommitWatch:
    """One watchdog thread per process that bounds COMMITs (see the module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, _Armed] = {}
        self._ids = itertools.count()
        self._pid: int | None = None
        self._wake_at: float | None = None  # when the thread wakes next (None: when told)

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's thread may have held it at the fork)
        and no thread yet; the first bounded COMMIT starts one."""
        self._cond = threading.Condition()
        self._armed = {}
        self._pid = None
        self._wake_at = None

    def run(self, conn: Connection, commit: Callable[[], T], bound: float | None) -> tuple[T, str]:
        """``commit()``, bounded by ``bound`` seconds (None: unbounded); return its result and
        the doubt about it: ``""`` when the server confirmed it, else why not. Exceptions
        propagate (the caller classifies them); a COMMIT cut by the bound raises one."""
        log = _LOGS.get(conn)
        if log is not None:
            log.clear()
        token = self._arm(conn, bound) if bound is not None else None
        try:
            result = commit()
        finally:
            fired = self._disarm(token) if token is not None else False
        if fired:
            return result, f"the COMMIT outlived its bound of {bound:g} s and was cancelled"
        warned = log.warnings() if log is not None else []
        if warned:
            _severity, sqlstate, message = warned[0]
            return result, f"the server answered the COMMIT with a warning ({sqlstate}: {message})"
        return result, ""

    def _arm(self, conn: Connection, bound: float) -> int:
        with self._cond:
            self._ensure_thread()
            token = next(self._ids)
            deadline = time.monotonic() + bound
            self._armed[token] = _Armed(conn, deadline)
            if self._wake_at is None or deadline < self._wake_at:
                self._cond.notify()  # else the thread wakes in time anyway: no switch per COMMIT
            return token

    def _disarm(self, token: int) -> bool:
        with self._cond:
            armed = self._armed.pop(token)
        if armed.done is not None:  # popped: the watch can no longer fire it
            armed.done.set()
        return armed.fired

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        threading.Thread(target=self._loop, name="ctrlrun-commit-watch", daemon=True).start()

    def _loop(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                due = [a for a in self._armed.values() if not a.fired and a.deadline <= now]
                for armed in due:
                    armed.done = threading.Event()
                    threading.Thread(target=_expire, args=(armed,), daemon=True).start()
                waiting = [a.deadline for a in self._armed.values() if not a.fired]
                wake = self._wake_at = min(waiting) if waiting else None
                self._cond.wait(timeout=None if wake is None else max(0.0, wake - now))


def _expire(armed: _Armed) -> None:
    """Cancel the COMMIT's wait; shut its socket if that did not end it within ``GRACE``."""
    with contextlib.suppress(Exception):  # the connection may be closing under us
        armed.conn.cancel_safe(timeout=GRACE)
    assert armed.done is not None  # made when it fired, before this thread started
    if armed.done.wait(GRACE):
        return
    with contextlib.suppress(Exception):
        sock = socket.socket(fileno=os.dup(armed.conn.pgconn.socket))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


WATCH: Final = CommitWatch()
os.register_at_fork(after_in_child=WATCH.after_fork)
