"""The Postgres named queries and migrations, composed for one schema.

The ``.sql`` files write the schema as ``{schema}``; it is filled in here with
``psycopg.sql.Identifier`` (quoted and escaped by the driver), never by string formatting. The
composed text keeps its ``%(name)s`` placeholders for the driver to bind.
"""

from __future__ import annotations

from functools import cache

from psycopg import sql

from ctrlrun.store.queries import load_queries, migration_files


def compose(text: str, schema: str, partitions: int = 1) -> str:
    """``text`` with every ``{schema}`` replaced by the quoted identifier ``schema`` (and a
    migration's ``{partitions}`` by the literal count a new store is created with)."""
    return (
        sql.SQL(text)
        .format(schema=sql.Identifier(schema), partitions=sql.Literal(int(partitions)))
        .as_string(None)
    )


@cache
def queries_for(schema: str) -> dict[str, str]:
    """Every named query, composed for ``schema`` (cached per schema)."""
    return {name: compose(text, schema) for name, text in load_queries("postgres").items()}


def migrations_for(schema: str, partitions: int = 1) -> tuple[tuple[str, str], ...]:
    """``(migration_id, sql)`` for every Postgres migration in order, composed for ``schema``
    (a new store is created with ``partitions`` receipt chains)."""
    return tuple(
        (mid, compose(text, schema, partitions)) for mid, text in migration_files("postgres")
    )
