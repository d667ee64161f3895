"""pgbouncer in front of the test server, run as a non-root user with its own ini.

Installed from Debian by ``scripts/install-pgbouncer.sh`` when absent (pgbouncer refuses to run as
root, so under root it runs as ``embedded_postgres``). Every wait is bounded; ``PgBouncer.stop()``
(or the owning ``PgServer.stop()``) ends the process and removes its directory.
"""

from __future__ import annotations

import pwd
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from .pg import (
    PgServer,
    PgUnavailable,
    chown_to,
    free_port,
    make_url,
    owned_dir,
    replace_url,
    service_user,
)

INSTALL_PGBOUNCER = Path(__file__).resolve().parents[2] / "scripts" / "install-pgbouncer.sh"


def pgbouncer_binary(*, install: bool = True) -> Path:
    """The pgbouncer binary; when absent and ``install``, run ``scripts/install-pgbouncer.sh``."""
    for candidate in (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    if not install:
        raise PgUnavailable("pgbouncer is not installed")
    proc = subprocess.run(
        ["bash", str(INSTALL_PGBOUNCER)],
        capture_output=True,
        text=True,
        timeout=100,  # inside pytest-timeout's 120 s per test
        check=False,
    )
    if proc.returncode != 0:
        raise PgUnavailable(f"installing pgbouncer failed:\n{proc.stdout}\n{proc.stderr}")
    return pgbouncer_binary(install=False)


@dataclass
class PgBouncer:
    """A pgbouncer on 127.0.0.1:``port`` in front of a ``PgServer``.

    ``url`` reaches the server's database through it as the server's user (trust auth on
    loopback; ``sslmode=disable``). Note pgbouncer 1.18 in transaction mode does not carry
    protocol-level prepared statements across transactions: psycopg clients must connect with
    ``prepare_threshold=None``.
    """

    url: str
    admin_url: str
    port: int
    pool_mode: str
    ini_path: Path
    log_path: Path
    _proc: subprocess.Popen[bytes]
    _root: Path
    _stopped: bool = False

    def url_for_database(self, dbname: str) -> str:
        return replace_url(self.url, dbname=dbname)

    def stop(self, *, timeout: float = 10.0) -> None:
        """Terminate pgbouncer (SIGTERM, then SIGKILL after ``timeout``). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout)
        shutil.rmtree(self._root, ignore_errors=True)


def start_pgbouncer(
    server: PgServer,
    pool_mode: str = "transaction",
    *,
    users: Iterable[str] = (),
    timeout: float = 20.0,
    pool_size: int = 20,
) -> PgBouncer:
    """Start pgbouncer (installing it if absent) in front of ``server``; raise if it cannot.

    It runs as a non-root OS user (``embedded_postgres`` when we are root), listens on
    127.0.0.1 on a free port, trusts the users in its auth file (the server's user plus
    ``users``) and forwards every database name to the same-named database on ``server``
    through at most ``pool_size`` server connections per database and user (a small pool makes
    clients share server connections between their transactions).
    ``server.stop()`` stops it too.
    """
    binary = pgbouncer_binary()
    user = server.system_user if server.system_user is not None else service_user()
    last_error = ""
    for _attempt in range(3):  # the free port may be taken between probe and bind
        bouncer = _try_pgbouncer(
            server, binary, user, pool_mode, [server.user, *users], timeout, pool_size
        )
        if isinstance(bouncer, PgBouncer):
            server.adopt(bouncer)
            return bouncer
        last_error = bouncer
    raise PgUnavailable(f"pgbouncer did not start:\n{last_error}")


def _try_pgbouncer(
    server: PgServer,
    binary: Path,
    user: str | None,
    pool_mode: str,
    users: list[str],
    timeout: float,
    pool_size: int = 20,
) -> PgBouncer | str:
    root = owned_dir("ctrlrun-pgbouncer-", user)
    port = free_port()
    auth_file = root / "userlist.txt"
    auth_file.write_text("".join(f'"{u}" ""\n' for u in dict.fromkeys(users)))
    ini = root / "pgbouncer.ini"
    log = root / "pgbouncer.log"
    ini.write_text(
        "[databases]\n"
        f"* = host={server.host} port={server.port}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {auth_file}\n"
        f"pool_mode = {pool_mode}\n"
        "max_client_conn = 200\n"
        f"default_pool_size = {pool_size}\n"
        f"admin_users = {server.user}\n"
        "ignore_startup_parameters = extra_float_digits\n"
        f"logfile = {log}\n"
        f"pidfile = {root / 'pgbouncer.pid'}\n"
    )
    for path in (auth_file, ini):
        chown_to(path, user)
    kwargs: dict[str, Any] = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    with (root / "stdout.log").open("wb") as out:
        proc = subprocess.Popen(
            [str(binary), str(ini)], cwd=root, stdout=out, stderr=subprocess.STDOUT, **kwargs
        )
    url = make_url(
        host="127.0.0.1", port=port, user=server.user, dbname=server.dbname, sslmode="disable"
    )
    bouncer = PgBouncer(
        url=url,
        admin_url=replace_url(url, dbname="pgbouncer"),
        port=port,
        pool_mode=pool_mode,
        ini_path=ini,
        log_path=log,
        _proc=proc,
        _root=root,
    )
    if _wait_until_serving(bouncer, timeout):
        return bouncer
    detail = "".join(
        p.read_text(errors="replace") for p in (root / "stdout.log", log) if p.exists()
    )
    bouncer.stop()
    return detail or f"pgbouncer exited {proc.returncode}"


def _wait_until_serving(bouncer: PgBouncer, timeout: float) -> bool:
    """Poll (bounded) until a query goes through ``bouncer``; False if it died or timed out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if bouncer._proc.poll() is not None:
            return False
        try:
            with psycopg.connect(
                bouncer.url, autocommit=True, connect_timeout=2, prepare_threshold=None
            ) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            time.sleep(0.05)  # readiness poll of a starting daemon, not a race
    return False
