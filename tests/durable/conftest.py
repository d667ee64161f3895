"""Durable fixtures: the same tests on a real SQLite file and on the real test Postgres.

``backend`` is parametrized: ``sqlite`` (a ``SQLiteStateStore`` on a file, with a clock the
test moves) and ``postgres`` (the real ``PostgresStateStore`` in a private schema, on the
server's clock). Time never passes by sleeping: ``backend.lapse(...)`` moves one lease into the
past (SQLite: relative to the injected clock; Postgres: relative to the server's ``now()``),
with test-only SQL run beside the store (``support.pg_sql``), never through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from ctrlrun._time import encode_instant
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store.sqlite import SQLiteStateStore
from ctrlrun.testing import ManualClock
from support import pg_sql
from support.clocks import DEFAULT_START


@dataclass
class Backend:
    name: str
    store: Any
    clock: ManualClock | None = None
    url: str = ""  # postgres: the server's URL (the store's own connections never serve tests)

    def sql(self, text: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Run test SQL in its own transaction: ``{t}`` is the table prefix (schema on PG);
        parameters are written ``:name`` and translated for Postgres."""
        params = params or {}
        if self.name == "sqlite":

            def work(txn):
                cursor = txn.connection.execute(text.replace("{t}", ""), params)
                return [dict(row) for row in cursor.fetchall()]

            return self.store.transact(work)
        import re

        pg = re.sub(r":([a-z_]+)", r"%(\1)s", text.replace("{t}", "{schema}."))
        return pg_sql.execute(self.url, self.store.schema, pg, params)

    def lapse(self, table: str, id_column: str, value: str, column: str) -> None:
        """Move ``column`` of one row one second into the past of the store's clock."""
        if self.name == "sqlite":
            past = encode_instant(self.clock() - timedelta(seconds=1))
            self.sql(
                f"UPDATE {{t}}{table} SET {column} = :past WHERE {id_column} = :id",
                {"past": past, "id": value},
            )
        else:
            self.sql(
                f"UPDATE {{t}}{table} SET {column} = now() - interval '1 second'"
                f" WHERE {id_column} = :id",
                {"id": value},
            )

    # Every column a lease, heartbeat, retry or expiry is judged by, per table (Postgres).
    DEADLINES = (
        ("effects", "lease_expires_at"),
        ("approvals", "expires_at"),
        ("outbox", "lease_expires_at"),
        ("outbox", "next_attempt_at"),
        ("plans", "heartbeat_expires_at"),
        ("plans", "expires_at"),
        ("operations", "lease_expires_at"),
    )

    @property
    def spec(self) -> str | tuple[str, str]:
        """What a child process needs to open the same store (``durable_workers.open_store``)."""
        return str(self.store.path) if self.name == "sqlite" else (self.url, self.store.schema)

    def pass_time(self, delta: timedelta) -> None:
        """Let ``delta`` pass for every deadline in the store. SQLite: the injected clock moves.
        Postgres (the server's clock cannot be moved): every deadline moves ``delta`` into the
        past, which is the same thing as far as any comparison with ``now()`` can tell."""
        if self.name == "sqlite":
            assert self.clock is not None
            self.clock.advance(delta)
            return
        seconds = {"seconds": delta.total_seconds()}
        for table, column in self.DEADLINES:
            self.sql(
                f"UPDATE {{t}}{table} SET {column} = {column} - make_interval(secs => :seconds)"
                f" WHERE {column} IS NOT NULL",
                seconds,
            )

    def fresh(self) -> Any:
        """A second handle on the same database (its own connections), as another worker has."""
        if self.name == "sqlite":
            return SQLiteStateStore(self.store.path, clock=self.clock)
        return PostgresStateStore(self.url, schema=self.store.schema)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(DEFAULT_START)


@pytest.fixture
def sqlite_backend(tmp_path, clock):
    store = SQLiteStateStore(tmp_path / "state.db", clock=clock)
    yield Backend("sqlite", store, clock)
    store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request, tmp_path, clock):
    if request.param == "sqlite":
        store = SQLiteStateStore(tmp_path / "state.db", clock=clock)
        yield Backend("sqlite", store, clock)
    else:
        schema = request.getfixturevalue("pg_schema")
        store = PostgresStateStore(schema.url, schema=schema.schema)
        yield Backend("postgres", store, url=schema.url)
    store.close()
