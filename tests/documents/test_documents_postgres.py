"""The Postgres SQL for documents, run on the real server: the migration applies, and a save
that loses the race inside the conditional update (READ COMMITTED re-check) is refused."""

from __future__ import annotations

import threading

import pytest

from ctrlrun.canonical import digest
from ctrlrun.documents.store import DocumentStore
from ctrlrun.errors import VersionConflict

pytestmark = pytest.mark.postgres


def test_the_migration_makes_c_collated_identity_columns(pg_state, pg_schema):
    with pg_schema.connect() as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, collation_name, data_type"
            " FROM information_schema.columns WHERE table_schema = %s"
            " AND table_name IN ('documents', 'document_versions')",
            (pg_schema.schema,),
        ).fetchall()
    columns = {(t, c): (coll, kind) for t, c, coll, kind in rows}
    assert columns[("documents", "doc_id")] == ("C", "text")
    assert columns[("document_versions", "doc_id")] == ("C", "text")
    assert columns[("documents", "updated_at")][1] == "timestamp with time zone"
    assert columns[("documents", "content")][1] == "text"  # exact canonical bytes, not jsonb


def _two_in_the_update(pg_state, docs, contents):
    """Both transactions read version 1 before either updates: the loser's UPDATE waits on
    the winner's row lock, then re-checks ``version = 1`` and matches nothing."""
    barrier = threading.Barrier(2)
    pg_state.hooks["document_update"] = lambda: barrier.wait(timeout=10)
    outcomes: dict[int, object] = {}

    def save(index: int) -> None:
        try:
            outcomes[index] = docs.save(
                "d", contents[index], expected_version=1, writer=f"w{index}"
            )
        except VersionConflict as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=save, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    pg_state.hooks.clear()
    return outcomes


def test_a_save_losing_inside_the_update_is_a_conflict(pg_state):
    docs = DocumentStore(pg_state)
    docs.create("d", {"n": 0})
    outcomes = _two_in_the_update(pg_state, docs, [{"n": "a"}, {"n": "b"}])
    assert sorted(type(o).__name__ for o in outcomes.values()) == ["VersionConflict", "int"]
    loser = next(o for o in outcomes.values() if isinstance(o, VersionConflict))
    assert loser.current_version == 2
    assert len(docs.history("d")) == 2


def test_a_save_losing_to_identical_content_is_answered_as_the_noop_it_is(pg_state):
    docs = DocumentStore(pg_state)
    docs.create("d", {"n": 0})
    outcomes = _two_in_the_update(pg_state, docs, [{"n": 1}, {"n": 1}])
    assert outcomes == {0: 2, 1: 2}
    assert [v.content_hash for v in docs.history("d")] == [digest({"n": 0}), digest({"n": 1})]
