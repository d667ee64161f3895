"""The two things checked before any connection is made: the schema name and the driver."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Final

from ctrlrun.errors import InvalidArgument, MissingDependency

MAX_IDENTIFIER: Final = 63  # NAMEDATALEN - 1: Postgres would silently truncate a longer name
_PLAIN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DRIVER_MODULES: Final = frozenset({"psycopg", "psycopg_binary", "psycopg_c"})


def check_schema_name(name: object) -> str:
    """``name`` if it is a plain identifier (ASCII letters, digits, underscores; not starting
    with a digit; at most 63 bytes); ``InvalidArgument`` otherwise.

    The schema is the only name ctrlrun interpolates into SQL (always as a quoted identifier);
    refusing everything else up front means a quote, a semicolon or a look-alike character
    never reaches the database, and a truncated name never silently addresses another schema.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"a Postgres schema name must be a non-empty string, got {name!r}")
    if len(name) > MAX_IDENTIFIER:
        raise InvalidArgument(
            f"schema name {name[:20]!r}… is {len(name)} characters; Postgres keeps only"
            f" {MAX_IDENTIFIER}"
        )
    if not _PLAIN.fullmatch(name):
        raise InvalidArgument(
            f"schema name {name!r} is not a plain identifier: use ASCII letters, digits and"
            " underscores, not starting with a digit"
        )
    return name


def load_driver() -> ModuleType:
    """The psycopg module; ``MissingDependency`` naming the install line when it is absent."""
    try:
        import psycopg
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in _DRIVER_MODULES:
            raise MissingDependency(module="psycopg", extra="postgres") from exc
        raise
    return psycopg
