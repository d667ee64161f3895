"""Documents on the real Postgres store: the migration's column types, and a save that loses
the race *inside* the conditional update (READ COMMITTED re-check) is refused from what is
stored then. The two transactions are lined up with the fault proxy (the winner's COMMIT is
held while the loser's UPDATE queues on its row lock), never with a hook in the store."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from ctrlrun.canonical import digest
from ctrlrun.documents.store import DocumentStore
from ctrlrun.errors import VersionConflict
from ctrlrun.postgres import PostgresStateStore
from support.pg_sql import wait_for_lock_waiter
from support.pgwire import is_commit

pytestmark = pytest.mark.postgres
WAIT = 30.0


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


def _loser_inside_the_update(pg_state, pg_schema, pg_proxy, winner_content, loser_content):
    """The winner (through the proxy) updates version 1 → 2 and its COMMIT is held; the loser
    (direct), based on version 1 too, reads 1 and its UPDATE waits on the winner's row lock;
    the COMMIT is released; the loser's UPDATE re-checks ``version = 1`` and matches nothing."""
    winner_store = PostgresStateStore(pg_proxy.url, schema=pg_schema.schema)
    winner, loser = DocumentStore(winner_store), DocumentStore(pg_state)
    try:
        pg_proxy.hold(is_commit)
        with ThreadPoolExecutor(2) as pool:
            won = pool.submit(winner.save, "d", winner_content, expected_version=1, writer="winner")
            pg_proxy.wait_held(WAIT)
            lost = pool.submit(loser.save, "d", loser_content, expected_version=1, writer="loser")
            wait_for_lock_waiter(pg_schema.server, "%UPDATE%documents%version%")
            assert pg_proxy.release()
            outcome = won.result(WAIT)
            try:
                return outcome, lost.result(WAIT)
            except VersionConflict as exc:
                return outcome, exc
    finally:
        winner_store.close()


def test_a_save_losing_inside_the_update_is_a_conflict(pg_state, pg_schema, pg_proxy):
    docs = DocumentStore(pg_state)
    docs.create("d", {"n": 0})
    won, lost = _loser_inside_the_update(pg_state, pg_schema, pg_proxy, {"n": "a"}, {"n": "b"})
    assert won == 2
    assert isinstance(lost, VersionConflict) and lost.current_version == 2
    assert [v.writer for v in docs.history("d")] == [None, "winner"]
    assert docs.get("d").content == {"n": "a"}


def test_a_save_losing_to_identical_content_is_answered_as_the_noop_it_is(
    pg_state, pg_schema, pg_proxy
):
    docs = DocumentStore(pg_state)
    docs.create("d", {"n": 0})
    outcomes = _loser_inside_the_update(pg_state, pg_schema, pg_proxy, {"n": 1}, {"n": 1})
    assert outcomes == (2, 2)
    assert [v.content_hash for v in docs.history("d")] == [digest({"n": 0}), digest({"n": 1})]
