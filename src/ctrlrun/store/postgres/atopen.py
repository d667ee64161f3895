"""What opening a Postgres store checks, in order, and the migrations it then runs.

1. (before connecting, in ``names``) the schema name is a plain identifier; then, on every
   new connection, the replication guard (``replication``): a writing open refuses a server
   without the synchronous replication it was told to require, or on an older timeline of a
   cluster this process has written newer;
2. the server is not a hot standby (``pg_is_in_recovery()``): every guarantee rests on a unique
   index and on compare-and-set updates, which a replica cannot do — and its reads would
   appear to work;
3. ``server_encoding`` is ``UTF8``: a lossy encoding could turn two distinct effect keys into
   one, or one key into two;
4. the schema exists (the store never creates it);
5. the role may use it (``USAGE``); whether it may also create in it decides who it is: a
   role with ``CREATE`` is the store's owner, the one role that migrates; any other (an
   agent's or an approver's role, decision 0024) never migrates;
6. the recorded schema history is compared with this binary's before any other table is read;
   the owner's writing open then migrates forward, one transaction per migration with its
   ``schema_version`` row; any other open refuses a history that is not current, naming the
   owner's command (``ctrlrun grants … --apply``), and an empty schema too.

Concurrent first starts are safe without any advisory lock: the first migration's transaction
creates ``schema_version``, and a second opener's ``CREATE`` blocks on it until that
transaction ends, then fails; the opener classifies again and finds the work done. Every later
migration takes ``schema_version``'s table lock first and re-reads what is applied.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg import errors, sql

from ctrlrun._time import Clock
from ctrlrun._version import __version__
from ctrlrun.errors import (
    PartitionRefusal,
    PartitionsMismatch,
    SchemaMismatch,
    StoreError,
    StoreNotFound,
)
from ctrlrun.kernel.partition import DEFAULT_PARTITIONS_POSTGRES as DEFAULT_PARTITIONS
from ctrlrun.kernel.partition import check_count
from ctrlrun.store.migrate import check_current, migrate_forward
from ctrlrun.store.postgres.connections import Connection, Connections
from ctrlrun.store.postgres.durability import Durability
from ctrlrun.store.postgres.engine import Engine
from ctrlrun.store.postgres.replication import ReplicationGuard
from ctrlrun.store.postgres.sqltext import migrations_for, queries_for

log = logging.getLogger("ctrlrun.postgres")

VERSION_TABLE: Final = "schema_version"
_RACED: Final = (errors.UniqueViolation, errors.DuplicateTable)


OWNER_COMMAND: Final = (
    "ctrlrun grants --store-url <the owner's URL> --agent <role> --approver <role> --apply"
)


def check_server(conn: Connection, queries: dict[str, str], schema: str, *, writing: bool) -> bool:
    """Checks 2 to 5 of the module docstring, in that order; the refusal names what to fix.
    True when the role may create in the schema (the owner, who alone migrates)."""
    row = conn.execute(queries["open_probe"], {"schema": schema}).fetchone()
    assert row is not None
    database = conn.info.dbname
    if row["in_recovery"]:
        raise StoreError(
            f"database {database!r} is a hot standby (pg_is_in_recovery() is true): ctrlrun"
            " needs the primary, whose unique index and compare-and-set writes every guarantee"
            " rests on; point the URL at the primary"
        )
    encoding = str(row["server_encoding"])
    if encoding.upper() != "UTF8":
        raise StoreError(
            f"database {database!r} has server_encoding {encoding}, not UTF8: effect keys"
            " could change identity in it; create the database with ENCODING 'UTF8'"
        )
    if not row["schema_exists"]:
        raise SchemaMismatch(
            f"schema {schema!r} does not exist in database {database!r}; ctrlrun never creates"
            f" it: run CREATE SCHEMA {_ident(schema)} and grant the role USAGE and CREATE on it"
        )
    if not row["can_use"]:
        needed = ("USAGE", "CREATE") if writing else ("USAGE",)
        grant = (
            f"GRANT {', '.join(needed)} ON SCHEMA {_ident(schema)} TO {_ident(row['role_name'])}"
        )
        raise StoreError(
            f"role {row['role_name']!r} lacks USAGE on schema {schema!r}; run: {grant}"
            " (an agent's or an approver's role: the owner runs `ctrlrun grants`)"
        )
    return bool(row["can_create"])


def _unowned_empty(row_role: str, schema: str, where: str) -> StoreError:
    grant = f"GRANT USAGE, CREATE ON SCHEMA {_ident(schema)} TO {_ident(row_role)}"
    return StoreError(
        f"{where} holds no ctrlrun store, and role {row_role!r} lacks CREATE on schema"
        f" {schema!r}: a role that does not own the store never creates or migrates it. The"
        f" owner creates it and grants the roles with `{OWNER_COMMAND}`; or, for one role"
        f" that owns the store itself, run: {grant}"
    )


def check_callable(conn: Connection, queries: dict[str, str], schema: str, role: str) -> None:
    """A writing role that does not own the store must hold EXECUTE on every call function
    (``roles.AGENT_FUNCTIONS``): one it lacks is refused here, naming the owner's command,
    rather than at the first call's write (an upgrade whose grants were not re-applied)."""
    from ctrlrun.store.postgres.roles import AGENT_FUNCTIONS

    params = {"schema": schema, "names": list(AGENT_FUNCTIONS)}
    missing = [str(r["name"]) for r in conn.execute(queries["open_uncallable"], params)]
    if missing:
        raise StoreError(
            f"role {role!r} does not own schema {schema!r} and may not execute {missing}: a"
            " protected call writes only through them; the owner grants them with"
            f" `{OWNER_COMMAND}`"
        )


def _unowned_remedy(role: str) -> str:
    return (
        f"role {role!r} does not own the store and never migrates it: the owner migrates it"
        f" and grants what the new schema needs with `{OWNER_COMMAND}`"
    )


class PgHistory:
    """``schema_version`` in one schema, for ``store.migrate`` (the shared runner)."""

    def __init__(self, conn: Connection, queries: dict[str, str], schema: str, where: str) -> None:
        self.conn, self.queries, self.schema, self.where = conn, queries, schema, where

    def _tables(self) -> list[str]:
        rows = self.conn.execute(self.queries["schema_tables"], {"schema": self.schema})
        return [str(r["name"]) for r in rows]

    def applied(self) -> tuple[str, ...]:
        return self._recorded() if VERSION_TABLE in self._tables() else ()

    def _recorded(self) -> tuple[str, ...]:
        rows = self.conn.execute(self.queries["schema_version_list"])
        return tuple(str(r["migration_id"]) for r in rows)

    def foreign_tables(self) -> list[str]:
        return [t for t in self._tables() if t != VERSION_TABLE]

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self.conn.transaction():
            if VERSION_TABLE in self._tables():
                self.conn.execute(self.queries["schema_version_lock"])
            yield

    def apply(self, migration_id: str, sql: str) -> None:
        exists = VERSION_TABLE in self._tables()
        applied = self._recorded() if exists else ()
        if not exists:  # the first migration creates the history, then holds its lock
            self.conn.execute(self.queries["schema_version_create"])
            self.conn.execute(self.queries["schema_version_lock"])
        try:
            self.conn.execute(sql)
        except psycopg.Error as exc:
            raise SchemaMismatch(
                f"{self.where}: migration {migration_id} failed and was rolled back ({exc}); the"
                f" schema stays at {applied[-1] if applied else 'empty'}",
                applied=applied,
                running=__version__,
            ) from exc
        version = {"migration_id": migration_id, "ctrlrun_version": __version__}
        self.conn.execute(self.queries["schema_version_insert"], version)

    def raced(self, error: BaseException) -> bool:
        if not isinstance(error, _RACED):
            return False
        log.info(
            "ctrlrun.postgres: %s: a concurrent first start created the schema first (%s);"
            " classifying again",
            self.where,
            error.sqlstate,
            extra={"migration_race": error.sqlstate},
        )
        return True


def _ident(name: Any) -> str:
    return sql.Identifier(str(name)).as_string(None)


def open_engine(
    url: str,
    schema: str,
    clock: Clock | None,
    *,
    writing: bool,
    create: bool = True,
    durability: Durability | None = None,
    partitions: int | None = None,
) -> Engine:
    """Connect, run the checks of the module docstring (migrating when ``writing``) and return
    the engine. Without ``create``, a schema holding no ctrlrun store is ``StoreNotFound``.
    Driver errors become ``StoreError``; the URL is never echoed (it may hold a password).
    Every connection first passes the replication guard (``replication``)."""
    queries = queries_for(schema)
    if partitions is not None:
        check_count(partitions)
    durability = durability or Durability()
    guard = ReplicationGuard(queries, durability, writing=writing)
    connections = Connections(url, on_connect=guard)
    try:
        conn = connections.current()
        where = f"schema {schema!r} of database {conn.info.dbname!r}"
        history = PgHistory(conn, queries, schema, where)
        if not create and not history.applied():
            raise StoreNotFound(
                f"no ctrlrun store in {where}: create it with `ctrlrun init --store-url …`"
                " (or Control.from_file(create=True)); a store is never created implicitly",
                location=where,
            )
        owner = check_server(conn, queries, schema, writing=writing)
        migrations = migrations_for(
            schema, DEFAULT_PARTITIONS if partitions is None else partitions
        )
        known = [migration_id for migration_id, _ in migrations]
        if writing and owner:
            migrate_forward(history, migrations, __version__)
        elif writing:
            role = str(conn.info.user)
            if not history.applied():
                raise _unowned_empty(role, schema, where)
            check_current(history, known, __version__, remedy=_unowned_remedy(role))
            check_callable(conn, queries, schema, role)
        else:
            check_current(history, known, __version__)
        count = stored_partitions(conn, queries, where, partitions)
    except psycopg.Error as exc:
        connections.close()
        raise StoreError(f"opening the Postgres store (schema {schema!r}) failed: {exc}") from exc
    except BaseException:
        connections.close()
        raise
    return Engine(
        connections,
        queries,
        clock=clock,
        schema=schema,
        where=where,
        durability=durability,
        guard=guard,
        partitions=count,
    )


def stored_partitions(
    conn: Connection, queries: dict[str, str], where: str, given: int | None
) -> int:
    """How many receipt chains the store keeps (its head rows are partitions 0..N-1);
    ``PartitionsMismatch`` when ``given`` is another count (it is fixed when the store is
    created). A head row deleted behind the store's back is not refused here: writing to its
    chain raises CR002, and every verifier names the missing head."""
    rows = conn.execute(queries["chain_heads_get"]).fetchall()
    count = max((int(row["partition_id"]) for row in rows), default=0) + 1
    if given is not None and given != count:
        raise PartitionsMismatch(
            f"{where} keeps {count} receipt partition(s), not {given}: the count is fixed"
            " when a store is created (drop the partitions setting to open it)",
            reason=PartitionRefusal.COUNT_DIFFERS,
            stored=count,
            given=given,
        )
    return count
