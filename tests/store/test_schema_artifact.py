"""The schema as an artifact: ``sql/<dialect>/schema.sql`` is exactly what the migrations make
(a test diffs it against a freshly migrated store), and SQLite and Postgres hold the same
tables, columns and keys but for an explicit list of differences."""

from __future__ import annotations

import os
import sqlite3

import pytest

from ctrlrun.store.sqlite import SQLiteStateStore
from support.schema_dump import HEADER, artifact, postgres_schema, sqlite_schema, without_header

THIS = "tests/store/test_schema_artifact.py"
NAMES = {"sqlite": "SQLite", "postgres": "Postgres"}


def _check(dialect: str, made: str) -> None:
    path = artifact(dialect)
    if os.environ.get("CTRLRUN_WRITE_SCHEMA"):
        path.write_text(HEADER.format(dialect=NAMES[dialect], test=THIS) + made)
    assert without_header(path.read_text()) == made, f"{path} is stale: CTRLRUN_WRITE_SCHEMA=1"


def test_the_sqlite_schema_file_is_what_the_migrations_make(tmp_path):
    SQLiteStateStore(tmp_path / "state.db").close()
    _check("sqlite", sqlite_schema(tmp_path / "state.db"))


@pytest.mark.postgres
def test_the_postgres_schema_file_is_what_the_migrations_make(pg_schema):
    from ctrlrun.postgres import PostgresStateStore

    PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
    _check("postgres", postgres_schema(pg_schema.server, pg_schema.schema))


# What differs between the two stores' schemas, and why. Anything else that differs fails.
ALLOWED: dict[str, str] = {
    "effects.write_token only on postgres": "a COMMIT's answer can be lost on the network: the"
    " re-read recognises its own effect write by the token (SQLite's COMMIT is a local call)",
    "receipts key ('receipt_id',) only on postgres": "that re-read finds its receipt by id;"
    " SQLite never looks one up",
    **dict.fromkeys(
        [
            "receipt_chain key ('id',) only on sqlite",
            "receipt_chain key ('partition_id',) only on postgres",
            "receipt_chain.id only on sqlite",
            "receipt_chain.partition_id only on postgres",
            "receipts key ('partition_id', 'seq') only on postgres",
            "receipts key ('seq',) only on sqlite",
            "receipts.partition_id only on postgres",
            "stats_mark key ('id',) only on sqlite",
            "stats_mark key ('partition_id',) only on postgres",
            "stats_mark.id only on sqlite",
            "stats_mark.partition_id only on postgres",
        ],
        "SQLite keeps one receipt chain (decision 0029: its writers take turns on the file),"
        " so its head, receipts and stats mark need no partition",
    ),
    "receipts.written only on postgres": "the write order across Postgres's several chains,"
    " from a sequence; SQLite's one chain's seq is that order",
}


def _sqlite_shape(path) -> dict[str, dict[str, object]]:
    shape: dict[str, dict[str, object]] = {}
    with sqlite3.connect(path) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        for table in tables:
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            columns = {row[1]: bool(row[3] or row[5]) for row in info}  # not null, or the key
            keys = {tuple(row[1] for row in sorted(info, key=lambda r: r[5]) if row[5])} - {()}
            for index in conn.execute(f"PRAGMA index_list({table})").fetchall():
                if index[2]:  # unique; index[4]: partial
                    cols = conn.execute(f"PRAGMA index_info({index[1]})").fetchall()
                    keys.add((*(c[2] for c in sorted(cols)), *(["(partial)"] if index[4] else [])))
            shape[table] = {"columns": columns, "keys": keys}
    return shape


def _postgres_shape(pg_schema) -> dict[str, dict[str, object]]:
    shape: dict[str, dict[str, object]] = {}
    with pg_schema.connect() as conn:
        for table, column, nullable in conn.execute(
            "SELECT table_name, column_name, is_nullable FROM information_schema.columns"
            " WHERE table_schema = %s ORDER BY table_name, ordinal_position",
            [pg_schema.schema],
        ):
            entry = shape.setdefault(table, {"columns": {}, "keys": set()})
            entry["columns"][column] = nullable == "NO"  # type: ignore[index]
        for table, columns, partial in conn.execute(
            "SELECT t.relname, array_agg(a.attname ORDER BY k.n), i.indpred IS NOT NULL"
            " FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid"
            " JOIN pg_namespace s ON s.oid = t.relnamespace"
            " CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
            " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum"
            " WHERE s.nspname = %s AND i.indisunique"
            " GROUP BY i.indexrelid, t.relname, i.indpred",
            [pg_schema.schema],
        ):
            key = (*columns, *(["(partial)"] if partial else []))
            shape[table]["keys"].add(key)  # type: ignore[union-attr]
    return shape


def _differences(left, right) -> set[str]:
    found = {f"table {t} only on sqlite" for t in left.keys() - right.keys()}
    found |= {f"table {t} only on postgres" for t in right.keys() - left.keys()}
    for table in left.keys() & right.keys():
        lcols, rcols = left[table]["columns"], right[table]["columns"]
        found |= {f"{table}.{c} only on sqlite" for c in lcols.keys() - rcols.keys()}
        found |= {f"{table}.{c} only on postgres" for c in rcols.keys() - lcols.keys()}
        found |= {
            f"{table}.{c} is {'NOT NULL' if rcols[c] else 'nullable'} on postgres only"
            for c in lcols.keys() & rcols.keys()
            if lcols[c] != rcols[c]
        }
        found |= {
            f"{table} key {k} only on sqlite" for k in left[table]["keys"] - right[table]["keys"]
        }
        found |= {
            f"{table} key {k} only on postgres" for k in right[table]["keys"] - left[table]["keys"]
        }
    return found


@pytest.mark.postgres
def test_sqlite_and_postgres_hold_the_same_tables_columns_and_keys(tmp_path, pg_schema):
    from ctrlrun.postgres import PostgresStateStore

    SQLiteStateStore(tmp_path / "state.db").close()
    PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
    found = _differences(_sqlite_shape(tmp_path / "state.db"), _postgres_shape(pg_schema))
    assert found == set(ALLOWED), "\n".join(sorted(found ^ set(ALLOWED)))
