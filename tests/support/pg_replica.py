"""A throwaway primary with a streaming standby, for the failover tests.

Its own cluster (never the session's server: these tests kill, freeze and promote it). The
primary runs with ``synchronous_standby_names='*'`` when ``sync`` is set, so every COMMIT waits
for the standby. Run as root, every server process runs as ``embedded_postgres``.

* ``pause_standby`` / ``resume_standby`` SIGSTOP / SIGCONT the standby's walreceiver: the
  primary's COMMITs then wait (``wait_event = 'SyncRep'``).
* ``crash_primary`` SIGKILLs the primary's postmaster and every process it started (a host
  that died), ``promote`` promotes the standby, ``restart_old_primary`` starts the crashed
  primary again as it was: writable, on its old timeline (the split brain a failover manager
  must prevent).
* ``multi_url`` is the multi-host URL docs/postgres.md recommends (both hosts,
  ``target_session_attrs=read-write``).

Every wait is bounded; ``stop`` ends every process started here (idempotent).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .pg import (
    PgUnavailable,
    chown_to,
    embedded_bin_dir,
    free_port,
    make_url,
    owned_dir,
    run_as,
    service_user,
)

_FAST_SETTINGS = "-c fsync=off -c full_page_writes=off -c wal_sender_timeout=0"


@dataclass
class Node:
    data_dir: Path
    socket_dir: Path
    port: int
    log: Path

    @property
    def url(self) -> str:
        return make_url(
            host=str(self.socket_dir), port=self.port, user="postgres", dbname="postgres"
        )

    def postmaster_pid(self) -> int | None:
        pidfile = self.data_dir / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


@dataclass
class ReplicatedCluster:
    """A primary and a standby (see the module docstring)."""

    sync: bool = True
    root: Path = field(init=False)
    primary: Node = field(init=False)
    standby: Node = field(init=False)
    _user: str | None = field(init=False, default=None)
    _bin: Path = field(init=False)
    _paused: int | None = field(init=False, default=None)

    def start(self) -> ReplicatedCluster:
        self._user = service_user()
        self._bin = embedded_bin_dir()
        self.root = owned_dir("ctrlrun-replica-", self._user)
        self.primary = self._node("primary")
        self.standby = self._node("standby")
        try:
            initdb = [str(self._bin / "initdb"), "-D", str(self.primary.data_dir)]
            run_as(
                self._user,
                [*initdb, "-U", "postgres", "-A", "trust", "-E", "UTF8", "-N"],
                cwd=self.root,
            )
            extra = " -c synchronous_standby_names='*'" if self.sync else ""
            self._pg_ctl(self.primary, "start", extra)
            backup = [str(self._bin / "pg_basebackup"), "-h", str(self.primary.socket_dir)]
            backup += ["-p", str(self.primary.port), "-U", "postgres"]
            backup += ["-D", str(self.standby.data_dir), "-R", "-X", "stream", "-c", "fast"]
            run_as(self._user, backup, cwd=self.root)
            self._pg_ctl(self.standby, "start", " -c hot_standby=on")
            self.wait_streaming()
        except BaseException:
            self.stop()
            raise
        return self

    def _node(self, name: str) -> Node:
        socket_dir = self.root / f"{name}-sock"
        socket_dir.mkdir(mode=0o755)
        chown_to(socket_dir, self._user)
        return Node(self.root / name, socket_dir, free_port(), self.root / f"{name}.log")

    def _pg_ctl(self, node: Node, action: str, extra: str = "") -> None:
        opts = f"-p {node.port} -k {node.socket_dir} -c listen_addresses='' {_FAST_SETTINGS}"
        args = [str(self._bin / "pg_ctl"), "-D", str(node.data_dir), "-o", opts + extra]
        run_as(self._user, [*args, "-l", str(node.log), "-w", "-t", "60", action], cwd=self.root)

    # -- observing -------------------------------------------------------------------------

    def multi_url(self, **params: str) -> str:
        hosts = f"{self.primary.socket_dir},{self.standby.socket_dir}"
        ports = f"{self.primary.port},{self.standby.port}"
        query = {"host": hosts, "port": ports, "target_session_attrs": "read-write"}
        query.update(params)
        return "postgresql://postgres@/postgres?" + "&".join(f"{k}={v}" for k, v in query.items())

    def wait_streaming(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with psycopg.connect(self.primary.url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.05)
        raise PgUnavailable("the standby never streamed from the primary")

    def waiting_on_sync(self, timeout: float = 30.0) -> list[int]:
        """The primary's backends waiting for the standby (at least one, within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with psycopg.connect(self.primary.url, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                ).fetchall()
            if rows:
                return [int(r[0]) for r in rows]
            time.sleep(0.02)
        raise AssertionError(f"no COMMIT waited for the standby within {timeout} s")

    def cancel(self, pids: list[int]) -> None:
        with psycopg.connect(self.primary.url, autocommit=True) as conn:
            for pid in pids:
                conn.execute("SELECT pg_cancel_backend(%s)", [pid])

    # -- faults ----------------------------------------------------------------------------

    def pause_standby(self) -> None:
        with psycopg.connect(self.standby.url, autocommit=True) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()
        assert row is not None, "the standby has no walreceiver"
        self._paused = int(row[0])
        os.kill(self._paused, signal.SIGSTOP)

    def resume_standby(self) -> None:
        if self._paused is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._paused, signal.SIGCONT)
            self._paused = None

    def crash_primary(self) -> None:
        """SIGKILL the primary's postmaster and all its children, as a dead host would."""
        pid = self.primary.postmaster_pid()
        assert pid is not None
        family = [pid, *_children(pid)]
        for member in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_alive(m) for m in family) and time.monotonic() < deadline:
            time.sleep(0.01)

    def promote(self) -> None:
        self.resume_standby()
        run_as(
            self._user,
            [
                str(self._bin / "pg_ctl"),
                "-D",
                str(self.standby.data_dir),
                "-w",
                "-t",
                "60",
                "promote",
            ],
            cwd=self.root,
        )

    def restart_old_primary(self, *, sync: bool | None = None) -> None:
        """Start the crashed primary again as it was (``sync``: with its synchronous setting,
        default as the cluster was made)."""
        extra = " -c synchronous_standby_names='*'" if (self.sync if sync is None else sync) else ""
        old = self.primary.postmaster_pid()
        if old is not None and not _alive(old):  # a rebooted host has no such process: a
            (self.primary.data_dir / "postmaster.pid").unlink()  # zombie must not block it
            lock = self.primary.socket_dir / f".s.PGSQL.{self.primary.port}.lock"
            lock.unlink(missing_ok=True)
        self._pg_ctl(self.primary, "start", extra)

    def stop(self) -> None:
        self.resume_standby()
        for node in (getattr(self, "standby", None), getattr(self, "primary", None)):
            if node is None or node.postmaster_pid() is None:
                continue
            with contextlib.suppress(PgUnavailable):
                stop = [str(self._bin / "pg_ctl"), "-D", str(node.data_dir), "-m", "immediate"]
                run_as(self._user, [*stop, "-w", "-t", "30", "stop"], cwd=self.root)
        if hasattr(self, "root"):
            shutil.rmtree(self.root, ignore_errors=True)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False
