"""What opening a Postgres store checks, in order, and the migrations it then runs.

1. (before connecting, in ``names``) the schema name is a plain identifier;
2. the server is not a hot standby (``pg_is_in_recovery()``): every guarantee rests on a unique
   index and on compare-and-set updates, which a replica cannot do — and its reads would
   appear to work;
3. ``server_encoding`` is ``UTF8``: a lossy encoding could turn two distinct effect keys into
   one, or one key into two;
4. the schema exists (the store never creates it);
5. the role may use it and create in it (a reading open needs only ``USAGE``);
6. the recorded schema history is compared with this binary's before any other table is read;
   a writing open then migrates forward, one transaction per migration with its
   ``schema_version`` row.

Concurrent first starts are safe without any advisory lock: the first migration's transaction
creates ``schema_version``, and a second opener's ``CREATE`` blocks on it until that
transaction ends, then fails; the opener classifies again and finds the work done. Every later
migration takes ``schema_version``'s table lock first and re-reads what is applied.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import psycopg
from psycopg import errors, sql

from ctrlrun._time import Clock
from ctrlrun._version import __version__
from ctrlrun.errors import SchemaMismatch, StoreError, StoreNotFound
from ctrlrun.store.migrate import classify, refuse_unless_current, refuse_unless_migratable
from ctrlrun.store.postgres.connections import Connection, Connections
from ctrlrun.store.postgres.engine import Engine
from ctrlrun.store.postgres.sqltext import migrations_for, queries_for

log = logging.getLogger("ctrlrun.postgres")

VERSION_TABLE: Final = "schema_version"
_RACED: Final = (errors.UniqueViolation, errors.DuplicateTable)


def check_server(conn: Connection, queries: dict[str, str], schema: str, *, writing: bool) -> None:
    """Checks 2 to 5 of the module docstring, in that order; the refusal names what to fix."""
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
    needed = ("USAGE", "CREATE") if writing else ("USAGE",)
    held = {"USAGE": row["can_use"], "CREATE": row["can_create"]}
    missing = [p for p in needed if not held[p]]
    if missing:
        role = _ident(row["role_name"])
        grant = f"GRANT {', '.join(needed)} ON SCHEMA {_ident(schema)} TO {role}"
        raise StoreError(
            f"role {row['role_name']!r} lacks {' and '.join(missing)} on schema {schema!r}"
            f" (migrations run at every open); run: {grant}"
        )


def migrate(conn: Connection, queries: dict[str, str], schema: str, where: str) -> None:
    """Classify, refuse what this binary must not touch, then apply what is missing."""
    migrations = migrations_for(schema)
    known = tuple(migration_id for migration_id, _ in migrations)
    for last_pass in (False, True):
        pending, bootstrap = _classify_for_writing(conn, queries, schema, known, where)
        try:
            for migration_id, text in migrations:
                if migration_id in pending:
                    step = (migration_id, text)
                    _apply(conn, queries, step, known=known, where=where, bootstrap=bootstrap)
                    bootstrap = False
            return
        except _RACED as exc:
            if last_pass or not bootstrap:
                raise
            log.info(
                "ctrlrun.postgres: %s: a concurrent first start created the schema first (%s);"
                " classifying again",
                where,
                exc.sqlstate,
                extra={"migration_race": exc.sqlstate},
            )


def check_current(conn: Connection, queries: dict[str, str], schema: str, where: str) -> None:
    """For a reading open: anything but an up-to-date schema is refused with an instruction."""
    known = tuple(migration_id for migration_id, _ in migrations_for(schema))
    tables = _tables(conn, queries, schema)
    applied = _applied(conn, queries) if VERSION_TABLE in tables else ()
    refuse_unless_current(classify(applied, known), applied, known, __version__, where)


def _classify_for_writing(
    conn: Connection, queries: dict[str, str], schema: str, known: tuple[str, ...], where: str
) -> tuple[tuple[str, ...], bool]:
    """The migrations still to apply, and whether ``schema_version`` must be created."""
    tables = _tables(conn, queries, schema)
    applied = _applied(conn, queries) if VERSION_TABLE in tables else ()
    plan = classify(applied, known)
    refuse_unless_migratable(plan, applied, known, __version__, where)
    foreign = [t for t in tables if t != VERSION_TABLE]
    if not applied and foreign:
        raise SchemaMismatch(
            f"{where} is not a ctrlrun store (it holds tables {foreign}); use an empty schema",
            known=known,
            running=__version__,
        )
    return plan.pending, VERSION_TABLE not in tables


def _apply(
    conn: Connection,
    queries: dict[str, str],
    step: tuple[str, str],
    *,
    known: tuple[str, ...],
    where: str,
    bootstrap: bool,
) -> None:
    """Apply ``step`` (id, SQL) in one transaction with its version row, unless someone did."""
    migration_id, text = step
    with conn.transaction():
        if bootstrap:
            conn.execute(queries["schema_version_create"])
        conn.execute(queries["schema_version_lock"])
        applied = _applied(conn, queries)
        plan = classify(applied, known)
        refuse_unless_migratable(plan, applied, known, __version__, where)
        if not plan.pending or plan.pending[0] != migration_id:
            return  # applied meanwhile by a concurrent opener
        try:
            conn.execute(text)
        except psycopg.Error as exc:
            raise SchemaMismatch(
                f"{where}: migration {migration_id} failed and was rolled back ({exc}); the"
                f" schema stays at {applied[-1] if applied else 'empty'}",
                applied=applied,
                known=known,
                running=__version__,
            ) from exc
        conn.execute(
            queries["schema_version_insert"],
            {"migration_id": migration_id, "ctrlrun_version": __version__},
        )


def _applied_here(conn: Connection, queries: dict[str, str], schema: str) -> tuple[str, ...]:
    """The migrations ``schema`` records; empty when it has no ctrlrun store (or is absent)."""
    return _applied(conn, queries) if VERSION_TABLE in _tables(conn, queries, schema) else ()


def _tables(conn: Connection, queries: dict[str, str], schema: str) -> list[str]:
    return [str(r["name"]) for r in conn.execute(queries["schema_tables"], {"schema": schema})]


def _applied(conn: Connection, queries: dict[str, str]) -> tuple[str, ...]:
    return tuple(str(r["migration_id"]) for r in conn.execute(queries["schema_version_list"]))


def _ident(name: Any) -> str:
    return sql.Identifier(str(name)).as_string(None)


def open_engine(
    url: str, schema: str, clock: Clock | None, *, writing: bool, create: bool = True
) -> Engine:
    """Connect, run the checks of the module docstring (migrating when ``writing``) and return
    the engine. Without ``create``, a schema holding no ctrlrun store is ``StoreNotFound``.
    Driver errors become ``StoreError``; the URL is never echoed (it may hold a password)."""
    connections = Connections(url)
    queries = queries_for(schema)
    try:
        conn = connections.current()
        where = f"schema {schema!r} of database {conn.info.dbname!r}"
        if not create and not _applied_here(conn, queries, schema):
            raise StoreNotFound(
                f"no ctrlrun store in {where}: create it with `ctrlrun init --store-url …`"
                " (or Control.from_file(create=True)); a store is never created implicitly",
                location=where,
            )
        check_server(conn, queries, schema, writing=writing)
        if writing:
            migrate(conn, queries, schema, where)
        else:
            check_current(conn, queries, schema, where)
    except psycopg.Error as exc:
        connections.close()
        raise StoreError(f"opening the Postgres store (schema {schema!r}) failed: {exc}") from exc
    except BaseException:
        connections.close()
        raise
    return Engine(connections, queries, clock=clock, schema=schema, where=where)
