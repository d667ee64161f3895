"""The schema of a migrated store as text: what ``sql/<dialect>/schema.sql`` holds.

SQLite: the ``CREATE`` statements ``sqlite_master`` keeps, tables then indexes, by name.
Postgres: ``pg_dump --schema-only`` of the store's schema, without comments, settings and
owners, the schema's name written ``{schema}``.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
from pathlib import Path

from support.pg import PgServer

SOURCES = Path(__file__).resolve().parents[2] / "src" / "ctrlrun" / "store" / "sql"
HEADER = (
    "-- The {dialect} schema of a store migrated by this ctrlrun: read it to see the schema\n"
    "-- whole (migrations/ is what creates it). Made by the test that checks it,\n"
    "-- {test}; CTRLRUN_WRITE_SCHEMA=1 rewrites it.\n\n"
)
_SKIPPED = ("--", "SET ", "SELECT pg_catalog.set_config", "\\restrict", "\\unrestrict")


def artifact(dialect: str) -> Path:
    return SOURCES / dialect / "schema.sql"


def without_header(text: str) -> str:
    lines = text.splitlines(keepends=True)
    while lines and (lines[0].startswith("--") or not lines[0].strip()):
        lines.pop(0)
    return "".join(lines)


def sqlite_schema(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
            " ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 ELSE 2 END, name"
        ).fetchall()
    return "\n\n".join(sql.strip() + ";" for (sql,) in rows) + "\n"


def postgres_schema(server: PgServer, schema: str) -> str:
    dumped = subprocess.run(
        [
            str(server.bin_dir / "pg_dump"),
            *("--schema-only", "--no-owner", "--no-privileges", "--no-comments"),
            f"--schema={schema}",
            f"--dbname={server.superuser_url}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kept = [line for line in dumped.splitlines() if not line.startswith(_SKIPPED)]
    text = re.sub(rf"\b{re.escape(schema)}\b", "{schema}", "\n".join(kept))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
