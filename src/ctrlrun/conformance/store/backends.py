"""Backends: how the suite gets fresh storage for each case.

A backend hands out one ``Scratch`` per case (a context manager that always cleans up, also
when the case raises). A scratch can open a store on its storage (optionally with an injected
clock, the suite's only seam), open a second independent handle on the same storage, name an
address a worker subprocess can open with ``ctrlrun.store.open_store``, and write a schema
version this binary does not know (for the migration case). No method injects faults into the
store: a seam in shipping code that exists only for tests is not allowed.

``reopen`` and ``url`` may answer ``None`` for storage that cannot be shared; the suite checks
that claim (it writes through one handle and reads through another) before it accepts the N/A.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from ctrlrun._time import Clock, encode_instant, utc_now
from ctrlrun._version import __version__
from ctrlrun.store.protocol import StateStore
from ctrlrun.store.url import SCHEMA_PARAM, parse_store_url, with_param


class Scratch(Protocol):
    """Private storage for one case."""

    def open(self, clock: Clock | None = None) -> StateStore:
        """A handle on this storage, created and migrated on first use."""
        ...

    def reopen(self, clock: Clock | None = None) -> StateStore | None:
        """A second, independent handle on the same storage, or None if there can be none."""
        ...

    def url(self) -> str | None:
        """A store URL a subprocess can open, or None if the storage is private to us."""
        ...

    def mark_newer_schema(self, migration_id: str) -> None:
        """Record ``migration_id`` as applied, as a newer ctrlrun would have."""
        ...


class StoreBackend(Protocol):
    """A kind of storage the suite can grade."""

    @property
    def name(self) -> str:
        """What the report calls it (never a password)."""
        ...

    def scratch(self, label: str) -> AbstractContextManager[Scratch]:
        """Fresh storage for the case ``label``, removed on exit however the case ended."""
        ...


class _Handles:
    """The store handles a scratch opened, closed together at the end of the case."""

    def __init__(self) -> None:
        self.opened: list[StateStore] = []

    def keep(self, store: StateStore) -> StateStore:
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self.opened:
            store.close()
        self.opened.clear()


class SQLiteScratch(_Handles):
    """One store file in a private directory."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.path = directory / "store.db"

    def open(self, clock: Clock | None = None) -> StateStore:
        from ctrlrun.store.sqlite import SQLiteStateStore

        store: Any = SQLiteStateStore(self.path, clock=clock)  # satisfies the protocol
        return self.keep(store)

    def reopen(self, clock: Clock | None = None) -> StateStore | None:
        return self.open(clock)

    def url(self) -> str | None:
        return f"sqlite://{self.path}"

    def mark_newer_schema(self, migration_id: str) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.execute(
                "INSERT INTO schema_version (migration_id, applied_at, ctrlrun_version)"
                " VALUES (?, ?, ?)",
                (migration_id, encode_instant(utc_now()), f"{__version__}+newer"),
            )
        conn.close()


class SQLiteBackend:
    """SQLite files, one private subdirectory per case under ``directory`` (default: a new
    temporary directory), each removed when its case ends."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None

    @property
    def name(self) -> str:
        where = self.directory if self.directory is not None else "a temporary directory"
        return f"sqlite (scratch files under {where})"

    @contextmanager
    def scratch(self, label: str) -> Iterator[Scratch]:
        folder = Path(tempfile.mkdtemp(prefix=f"ctrlrun-conformance-{label}-", dir=self.directory))
        scratch = SQLiteScratch(folder)
        try:
            yield scratch
        finally:
            scratch.close_all()
            shutil.rmtree(folder, ignore_errors=True)


class PostgresScratch(_Handles):
    """One private schema; ``url()`` carries it as ``ctrlrun_schema``."""

    def __init__(self, driver_url: str, schema: str, store_url: str) -> None:
        super().__init__()
        self.driver_url, self.schema, self._store_url = driver_url, schema, store_url

    def open(self, clock: Clock | None = None) -> StateStore:
        from ctrlrun.postgres import (  # type: ignore[import-not-found,unused-ignore]
            PostgresStateStore,
        )

        store: StateStore = PostgresStateStore(self.driver_url, schema=self.schema, clock=clock)
        return self.keep(store)

    def reopen(self, clock: Clock | None = None) -> StateStore | None:
        return self.open(clock)

    def url(self) -> str | None:
        return self._store_url

    def mark_newer_schema(self, migration_id: str) -> None:
        psycopg: Any = __import__("psycopg")
        with psycopg.connect(self.driver_url, autocommit=True) as conn:
            conn.execute(
                psycopg.sql.SQL(
                    "INSERT INTO {}.schema_version (migration_id, applied_at, ctrlrun_version)"
                    " VALUES (%s, now(), %s)"
                ).format(psycopg.sql.Identifier(self.schema)),
                [migration_id, f"{__version__}+newer"],
            )


class PostgresBackend:
    """A Postgres database; each case gets a private schema ``ctrlrun_conf_<hex>``, created
    with ``PostgresStateStore.create_schema`` and dropped when the case ends (bounded by a lock
    timeout), also when the case raised. The role needs ``CREATE`` on the database.
    A ``ctrlrun_schema`` in ``url`` is ignored: the suite never touches an existing schema."""

    def __init__(self, url: str) -> None:
        self.driver_url = parse_store_url(url).target
        self.leaked: list[str] = []

    @property
    def name(self) -> str:
        parts = urlsplit(self.driver_url)
        host = parts.hostname or dict(parse_qsl(parts.query)).get("host", "local socket")
        return f"postgres ({host}, database {parts.path.lstrip('/') or 'default'})"

    @contextmanager
    def scratch(self, label: str) -> Iterator[Scratch]:
        from ctrlrun.postgres import PostgresStateStore

        schema = f"ctrlrun_conf_{secrets.token_hex(6)}"
        PostgresStateStore.create_schema(self.driver_url, schema)
        scratch = PostgresScratch(self.driver_url, schema, with_schema(self.driver_url, schema))
        try:
            yield scratch
        finally:
            scratch.close_all()
            drop_schema(self.driver_url, schema, self.leaked)


def with_schema(driver_url: str, schema: str) -> str:
    """``driver_url`` with ``ctrlrun_schema=schema`` (the form ``open_store`` reads)."""
    return with_param(driver_url, SCHEMA_PARAM, schema)


def drop_schema(driver_url: str, schema: str, leaked: list[str]) -> None:
    """Drop ``schema`` and everything in it, waiting at most 10 s for locks; a schema that
    cannot be dropped is appended to ``leaked`` (reported as a warning, never swallowed)."""
    try:
        psycopg: Any = __import__("psycopg")
        sql = psycopg.sql
        with psycopg.connect(driver_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute("SET lock_timeout = '10s'")
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except Exception as exc:
        leaked.append(f"scratch schema {schema} was not dropped: {type(exc).__name__}: {exc}")
