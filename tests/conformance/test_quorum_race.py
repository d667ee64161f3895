"""``approvals/quorum-cross-process`` on both stores: eight OS processes grant a 2-of-8 and a
3-of-8 request at once, and each ends GRANTED by exactly its quorum. On Postgres the grants
were counted without a lock, so simultaneous grants left such a request pending for ever."""

from __future__ import annotations

import pytest

from ctrlrun.conformance.store import PostgresBackend, SQLiteBackend, Status, run

ONLY = ("quorum-cross-process",)


def passed(report) -> list[tuple[str, str]]:
    [result] = report.results
    assert result.status is Status.PASS, result.reason
    return [(result.name, result.detail)]


def test_quorum_race_on_sqlite():
    [(name, detail)] = passed(run(SQLiteBackend(), only=ONLY, processes=8))
    assert name == "approvals/quorum-cross-process" and "2-of-8 and 3-of-8" in detail


@pytest.mark.postgres
@pytest.mark.parametrize("round_", range(3))
def test_quorum_race_on_postgres(pg_server, round_):
    [(_, detail)] = passed(run(PostgresBackend(pg_server.url), only=ONLY, processes=8))
    assert "2-of-8 and 3-of-8" in detail
