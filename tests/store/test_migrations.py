"""Schema versioning: forward-only, recorded, and refused when the database is not ours."""

from __future__ import annotations

import sqlite3

import pytest

from ctrlrun.errors import SchemaMismatch
from ctrlrun.store import migrate, open_store
from ctrlrun.store.migrate import SchemaShape, classify
from ctrlrun.store.queries import migration_files, parse_queries
from ctrlrun.store.sqlite import SQLiteStateStore, split_statements

KNOWN = tuple(m for m, _ in migration_files("sqlite"))


def applied_rows(path):
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT migration_id, applied_at FROM schema_version").fetchall()


def make_versioned(path, *ids):
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE schema_version (migration_id TEXT PRIMARY KEY,"
            " applied_at TEXT NOT NULL, ctrlrun_version TEXT NOT NULL)"
        )
        conn.executemany(
            "INSERT INTO schema_version VALUES (?, '2030-01-01', '9.9.9')", [(i,) for i in ids]
        )


class TestClassify:
    @pytest.mark.parametrize(
        ("applied", "shape", "pending"),
        [
            ((), SchemaShape.EMPTY, ("a", "b")),
            (("a", "b"), SchemaShape.CURRENT, ()),
            (("a",), SchemaShape.BEHIND, ("b",)),
            (("a", "b", "c"), SchemaShape.AHEAD, ()),
            (("a", "x"), SchemaShape.DIVERGENT, ()),
            (("b",), SchemaShape.DIVERGENT, ()),
        ],
    )
    def test_shapes(self, applied, shape, pending):
        plan = classify(applied, ("a", "b"))
        assert (plan.shape, plan.pending) == (shape, pending)


class TestOpen:
    def test_a_new_file_is_migrated_and_recorded(self, db_path):
        SQLiteStateStore(db_path)
        assert [row[0] for row in applied_rows(db_path)] == list(KNOWN)

    def test_reopening_runs_nothing(self, db_path):
        SQLiteStateStore(db_path)
        first = applied_rows(db_path)
        SQLiteStateStore(db_path)
        assert applied_rows(db_path) == first

    def test_a_newer_schema_is_refused_naming_both_versions_before_reading_anything(self, db_path):
        make_versioned(db_path, *KNOWN, "9999_from_the_future")  # no other table exists at all
        with pytest.raises(SchemaMismatch) as caught:
            SQLiteStateStore(db_path)
        assert "9999_from_the_future" in str(caught.value) and KNOWN[-1] in str(caught.value)
        assert caught.value.applied[-1] == "9999_from_the_future" and caught.value.known == KNOWN

    def test_a_divergent_history_is_refused(self, db_path):
        make_versioned(db_path, "0001_someone_elses")
        with pytest.raises(SchemaMismatch, match="diverges"):
            SQLiteStateStore(db_path)

    def test_a_foreign_database_is_refused(self, db_path):
        with sqlite3.connect(db_path) as conn:
            conn.execute("CREATE TABLE customers (id INTEGER)")
        with pytest.raises(SchemaMismatch, match="not a ctrlrun store"):
            SQLiteStateStore(db_path)

    def test_a_failing_migration_leaves_the_old_version(self, db_path, monkeypatch):
        SQLiteStateStore(db_path)
        broken = (*migration_files("sqlite"), ("9000_broken", "CREATE TABLE t (a);\nNOT SQL;"))
        monkeypatch.setattr("ctrlrun.store.sqlite.migration_files", lambda _d: broken)
        with pytest.raises(Exception, match="syntax error"):
            SQLiteStateStore(db_path)
        assert [row[0] for row in applied_rows(db_path)] == list(KNOWN)
        with sqlite3.connect(db_path) as conn:
            assert (
                conn.execute("SELECT name FROM sqlite_master WHERE name = 't'").fetchone() is None
            )


class TestOpenExisting:
    def test_a_missing_store_is_refused_and_not_created(self, tmp_path):
        target = tmp_path / "state.db"
        with pytest.raises(SchemaMismatch, match="no ctrlrun store"):
            open_store(f"sqlite:///{target}", existing=True)
        assert not target.exists()

    def test_an_empty_file_is_refused_and_left_empty(self, db_path):
        sqlite3.connect(db_path).close()
        with pytest.raises(SchemaMismatch, match="holds no ctrlrun schema"):
            SQLiteStateStore.open_existing(db_path)
        with sqlite3.connect(db_path) as conn:
            assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0

    def test_a_behind_store_is_refused_without_migrating(self, db_path, monkeypatch):
        SQLiteStateStore(db_path)
        ahead = (*migration_files("sqlite"), ("9000_next", "CREATE TABLE t (a);"))
        monkeypatch.setattr("ctrlrun.store.sqlite.migration_files", lambda _d: ahead)
        with pytest.raises(SchemaMismatch, match="does not migrate"):
            SQLiteStateStore.open_existing(db_path)
        assert [row[0] for row in applied_rows(db_path)] == list(KNOWN)

    def test_a_current_store_opens_and_reads(self, db_path):
        SQLiteStateStore(db_path)
        assert SQLiteStateStore.open_existing(db_path).list_effects() == ()


def test_statements_split_on_completeness_not_on_semicolons_in_text():
    sql = "-- c\nCREATE TABLE a (x TEXT DEFAULT ';');\n\nINSERT INTO a VALUES ('1;2');\n"
    assert list(split_statements(sql)) == [
        "CREATE TABLE a (x TEXT DEFAULT ';');",
        "INSERT INTO a VALUES ('1;2');",
    ]
    with pytest.raises(ValueError, match="incomplete"):
        list(split_statements("CREATE TABLE b (x"))


def test_named_queries_refuse_duplicates():
    with pytest.raises(ValueError, match="duplicated"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")
    assert parse_queries("-- name: a\n-- doc\nSELECT 1;\n")["a"] == "SELECT 1"


def test_refusal_helpers_name_an_unknown_history():
    with pytest.raises(SchemaMismatch):
        migrate.refuse_unless_current(classify(("x",), ("a",)), ("x",), ("a",), "0", "db")


def test_each_migration_number_is_used_once_per_dialect(tmp_path, monkeypatch):
    """Two branches that each took the next number would apply in a guessed order: refused."""
    for dialect in ("sqlite", "postgres"):
        numbers = [m[:4] for m, _ in migration_files(dialect)]
        assert len(numbers) == len(set(numbers)), dialect
    from importlib import resources

    import ctrlrun.store.queries as queries

    folder = tmp_path / "sql" / "sqlite" / "migrations"
    folder.mkdir(parents=True)
    (folder / "0001_a.sql").write_text("SELECT 1;")
    (folder / "0001_b.sql").write_text("SELECT 1;")
    monkeypatch.setattr(queries.resources, "files", lambda _package: tmp_path)
    with pytest.raises(ValueError, match="0001 is used twice"):
        queries.migration_files("sqlite")
    assert resources.files("ctrlrun.store")  # the real package is untouched
