"""What only the SQLite store has: its file, its PRAGMAs, its path checks."""

from __future__ import annotations

import sqlite3

import pytest

from ctrlrun.errors import InvalidArgument
from ctrlrun.store.sqlite import SQLiteStateStore


@pytest.fixture
def sqlite_store(db_path):
    opened = SQLiteStateStore(db_path)
    yield opened
    opened.close()


class TestOpening:
    def test_durable_by_default(self, sqlite_store):
        conn = sqlite3.connect(sqlite_store.path)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert sqlite_store._connection().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL

    def test_normal_durability_is_an_explicit_opt_in(self, db_path):
        normal = SQLiteStateStore(db_path, durability="normal")
        assert normal._connection().execute("PRAGMA synchronous").fetchone()[0] == 1
        with pytest.raises(InvalidArgument):
            SQLiteStateStore(db_path, durability="off")

    @pytest.mark.parametrize(
        "path", [":memory:", "", "file::memory:?cache=shared", "file:x?mode=memory"]
    )
    def test_in_memory_is_refused(self, path):
        with pytest.raises(InvalidArgument):
            SQLiteStateStore(path)

    def test_a_missing_directory_is_refused_not_created(self, tmp_path):
        with pytest.raises(InvalidArgument, match="no directory"):
            SQLiteStateStore(tmp_path / "nope" / "state.db")
        assert not (tmp_path / "nope").exists()
