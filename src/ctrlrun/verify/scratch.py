"""Scratch stores for ``ctrlrun verify``: created per guarantee, always removed, never the
operator's.

SQLite: one file per guarantee in a temporary directory removed in a ``finally``. Postgres
(``--store-url postgresql://…``): first a probe proves the role has ``CREATE`` on the database
(a privilege check naming what is missing, then a probe schema created and dropped); then one
schema ``ctrlrun_verify_<hex>`` per guarantee, created with
``PostgresStateStore.create_schema``, dropped when the guarantee ends however it ends (a drop
that fails is reported as a warning, never swallowed). ``$CTRLRUN_STORE_URL`` is never read.
"""

from __future__ import annotations

import importlib
import secrets
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ctrlrun._time import Clock
from ctrlrun.errors import CtrlrunError, MissingDependency
from ctrlrun.store.url import parse_store_url


class ConfigRefused(CtrlrunError):
    """Verify cannot run with this configuration (exit 2); the message says why."""


class Scratch(Protocol):
    """One guarantee's private store."""

    kind: str

    def open(self, clock: Clock | None = None) -> Any:
        """A handle on the scratch store (created and migrated on first use)."""
        ...

    def url(self) -> str:
        """The store URL a worker process opens with ``ctrlrun.store.open_store``."""
        ...

    def tamper_receipt(self, seq: int, document: str) -> None:
        """Overwrite the stored document of receipt ``seq`` (for G9), behind the store."""
        ...

    def cut_tail(self, seq: int, head_hash: str) -> None:
        """Delete every receipt after ``seq`` and rewind the head row to ``(seq, head_hash)``
        (for G12), behind the store, in one transaction."""
        ...


class _Handles:
    def __init__(self) -> None:
        self.opened: list[Any] = []

    def close_all(self) -> None:
        for store in self.opened:
            store.close()
        self.opened.clear()


class SQLiteScratch(_Handles):
    """A store file in verify's temporary directory."""

    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def open(self, clock: Clock | None = None) -> Any:
        from ctrlrun.store.sqlite import SQLiteStateStore

        store = SQLiteStateStore(self.path, clock=clock)
        self.opened.append(store)
        return store

    def url(self) -> str:
        return f"sqlite://{self.path}"

    def tamper_receipt(self, seq: int, document: str) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.execute("UPDATE receipts SET document = ? WHERE seq = ?", (document, seq))
        conn.close()

    def cut_tail(self, seq: int, head_hash: str) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.execute("DELETE FROM receipts WHERE seq > ?", (seq,))
            conn.execute(
                "UPDATE receipt_chain SET seq = ?, hash = ? WHERE id = 1", (seq, head_hash)
            )
        conn.close()


class SQLiteScratches:
    """One temporary directory for the run; a file per guarantee."""

    kind = "sqlite"
    warnings: list[str]

    def __init__(self) -> None:
        self.warnings = []
        self._dir = Path()

    @contextmanager
    def session(self) -> Iterator[SQLiteScratches]:
        self._dir = Path(tempfile.mkdtemp(prefix="ctrlrun-verify-"))
        try:
            yield self
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    @contextmanager
    def scratch(self, gid: str) -> Iterator[Scratch]:
        scratch = SQLiteScratch(self._dir / f"{gid.lower()}.db")
        try:
            yield scratch
        finally:
            scratch.close_all()


def load_psycopg() -> Any:
    """The driver, or ``MissingDependency`` naming the install line."""
    try:
        return importlib.import_module("psycopg")
    except ModuleNotFoundError as exc:
        raise MissingDependency(module="psycopg", extra="postgres") from exc


class PostgresScratch(_Handles):
    """A private schema; the store's connections carry ``application_name`` so G11 can find
    them from another session."""

    kind = "postgres"

    def __init__(self, driver_url: str, schema: str) -> None:
        super().__init__()
        self.driver_url, self.schema = driver_url, schema
        self.application_name = schema

    def connection_url(self) -> str:
        from ctrlrun.store.url import with_param

        return with_param(self.driver_url, "application_name", self.application_name)

    def open(self, clock: Clock | None = None) -> Any:
        from ctrlrun.postgres import (  # type: ignore[import-not-found,unused-ignore]
            PostgresStateStore,
        )

        # one chain: the guarantees cut and tamper by seq, as on SQLite
        store = PostgresStateStore(
            self.connection_url(), schema=self.schema, clock=clock, partitions=1
        )
        self.opened.append(store)
        return store

    def url(self) -> str:
        from ctrlrun.conformance.store.backends import with_schema
        from ctrlrun.store.url import PARTITIONS_PARAM, with_param

        return with_param(with_schema(self.connection_url(), self.schema), PARTITIONS_PARAM, "1")

    def admin(self) -> Any:
        """A separate autocommit session (not the store's)."""
        return load_psycopg().connect(self.driver_url, autocommit=True, connect_timeout=10)

    def tamper_receipt(self, seq: int, document: str) -> None:
        sql = importlib.import_module("psycopg.sql")
        with self.admin() as conn:
            statement = sql.SQL("UPDATE {}.receipts SET document = %s WHERE seq = %s")
            conn.execute(statement.format(sql.Identifier(self.schema)), [document, seq])

    def cut_tail(self, seq: int, head_hash: str) -> None:
        sql = importlib.import_module("psycopg.sql")
        schema = sql.Identifier(self.schema)
        with self.admin() as conn, conn.transaction():
            conn.execute(sql.SQL("DELETE FROM {}.receipts WHERE seq > %s").format(schema), [seq])
            rewind = sql.SQL(
                "UPDATE {}.receipt_chain SET seq = %s, hash = %s WHERE partition_id = 0"
            )
            conn.execute(rewind.format(schema), [seq, head_hash])


class PostgresScratches:
    """A schema per guarantee in the database ``url`` names (its ``ctrlrun_schema`` is not
    used: verify never touches an existing schema)."""

    kind = "postgres"

    def __init__(self, url: str) -> None:
        self.driver_url = parse_store_url(url).target
        self.warnings: list[str] = []
        load_psycopg()

    @contextmanager
    def session(self) -> Iterator[PostgresScratches]:
        probe_create(self.driver_url)
        try:
            importlib.import_module("ctrlrun.postgres")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("ctrlrun"):
                raise ConfigRefused("this build of ctrlrun has no Postgres store") from exc
            raise
        yield self

    @contextmanager
    def scratch(self, gid: str) -> Iterator[Scratch]:
        from ctrlrun.conformance.store.backends import drop_schema
        from ctrlrun.postgres import PostgresStateStore

        schema = f"ctrlrun_verify_{secrets.token_hex(6)}"
        PostgresStateStore.create_schema(self.driver_url, schema)
        scratch = PostgresScratch(self.driver_url, schema)
        try:
            yield scratch
        finally:
            scratch.close_all()
            drop_schema(self.driver_url, schema, self.warnings)


def probe_create(driver_url: str) -> None:
    """``ConfigRefused`` naming the role and database unless the role may create schemas:
    the privilege is read first (to name what is missing), then a probe schema is created and
    dropped (to prove it)."""
    psycopg = load_psycopg()
    sql = importlib.import_module("psycopg.sql")
    try:
        with psycopg.connect(driver_url, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT current_user, current_database(),"
                " has_database_privilege(current_database(), 'CREATE')"
            ).fetchone()
            role, database, allowed = row
            if not allowed:
                raise ConfigRefused(
                    f"role {role} has no CREATE privilege on database {database}: verify"
                    " creates a scratch schema per guarantee and drops it"
                    f" (GRANT CREATE ON DATABASE {database} TO {role})"
                )
            probe = sql.Identifier(f"ctrlrun_verify_probe_{secrets.token_hex(4)}")
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(probe))
            conn.execute(sql.SQL("DROP SCHEMA {}").format(probe))
    except psycopg.Error as exc:
        raise ConfigRefused(f"cannot prepare scratch schemas: {exc}") from exc
