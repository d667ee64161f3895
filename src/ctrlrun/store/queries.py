"""Named SQL queries, read once from every ``sql/<dialect>/*.sql`` file.

Each topic keeps its own file (``queries.sql`` for the kernel, others for later parts); a name
defined twice across files is refused. A query file is a sequence of blocks, each introduced by
a ``-- name: <query_name>`` line; the block's text up to the next marker is the statement.
Queries are plain strings: no identifier is ever interpolated here (a dialect that needs a
schema name composes it safely itself).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Final

_MARKER: Final = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """The named statements in ``text``; ``ValueError`` on a duplicate or empty query."""
    queries: dict[str, str] = {}
    markers = list(_MARKER.finditer(text))
    for index, marker in enumerate(markers):
        end = markers[index + 1].start() if index + 1 < len(markers) else len(text)
        body = (
            "\n".join(
                line
                for line in text[marker.end() : end].strip().splitlines()
                if not line.lstrip().startswith("--")
            )
            .strip()
            .rstrip(";")
            .strip()
        )
        name = marker.group(1)
        if name in queries or not body:
            raise ValueError(f"query {name!r} is duplicated or empty")
        queries[name] = body
    return queries


SCHEMA_FILE: Final = "schema.sql"
"""The dialect's whole schema, for reading (decision 0019): no queries in it."""


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """The named queries of every ``sql/<dialect>/*.sql`` file, parsed once; a name defined in
    two files is refused (``ValueError``)."""
    folder = resources.files("ctrlrun.store").joinpath("sql", dialect)
    queries: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql") or entry.name == SCHEMA_FILE:
            continue
        found = parse_queries(entry.read_text(encoding="utf-8"))
        clash = sorted(set(found) & set(queries))
        if clash:
            raise ValueError(f"{dialect}/{entry.name} redefines queries {clash}")
        queries.update(found)
    return queries


def migration_files(dialect: str) -> tuple[tuple[str, str], ...]:
    """``(migration_id, sql)`` for every ``NNNN_name.sql`` of ``dialect``, in order."""
    folder = resources.files("ctrlrun.store").joinpath("sql", dialect, "migrations")
    found = sorted(
        (entry.name.removesuffix(".sql"), entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )
    numbers: set[str] = set()
    for migration_id, _ in found:
        if not re.fullmatch(r"\d{4}_[a-z0-9_]+", migration_id):
            raise ValueError(f"migration file {migration_id!r} is not named NNNN_name.sql")
        if migration_id[:4] in numbers:  # two branches took one number: the order is a guess
            raise ValueError(f"migration number {migration_id[:4]} is used twice ({dialect})")
        numbers.add(migration_id[:4])
    return tuple(found)
