"""Multi-row statements for SQLite: one ``INSERT … VALUES (…), (…)`` instead of one execution
per row (each execution is a pass through the VM and its bindings). Only a plain
``INSERT … VALUES (:a, :b)`` with nothing after the row is folded; anything else runs per row.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

_VALUES: Final = re.compile(r"\bVALUES\s*\(([^()]*)\)\s*\Z", re.IGNORECASE)
_NAMED: Final = re.compile(r"\s*:([A-Za-z_][A-Za-z0-9_]*)\s*\Z")
# Well under SQLite's limit of 32,766 bound values per statement, for any row width.
ROWS_PER_STATEMENT: Final = 100


@lru_cache(maxsize=64)
def row_names(sql: str) -> tuple[str, ...] | None:
    """For ``INSERT ... VALUES (:a, :b)`` with nothing after the row: the parameter names in
    order; None for any other statement (which then runs once per row)."""
    match = _VALUES.search(sql)
    if match is None:
        return None
    names = []
    for item in match.group(1).split(","):
        named = _NAMED.fullmatch(item)
        if named is None:
            return None
        names.append(named.group(1))
    return tuple(names)


@lru_cache(maxsize=256)
def rows_statement(sql: str, rows: int) -> str:
    """``sql`` (one for which ``row_names`` answers) inserting ``rows`` rows at once, with
    positional parameters: the names' values row after row."""
    match = _VALUES.search(sql)
    assert match is not None
    width = len(match.group(1).split(","))
    row = "(" + ", ".join(["?"] * width) + ")"
    return sql[: match.start()] + "VALUES " + ", ".join([row] * rows)
