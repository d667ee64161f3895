"""A real failover under load: a primary with a synchronous standby, four worker processes on
the multi-host URL docs/postgres.md recommends, the primary SIGKILLed mid-load, the standby
promoted, the load continued. Then the old primary is restarted as it was — writable, on the
old timeline — and every worker's reconnection lands on it first: each must refuse it.

Asserted from the workers' own ledger (what really ran, outside the database) against the new
primary's records: no key executed twice, no FAILED record for an executed key, no executed
key without its record, every record left short of COMMITTED explained by an unknown outcome
a worker was told about, and every receipt a worker was handed present and identical.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import ctrlrun
from ctrlrun import Control, HeldStatus, check_held_receipts
from ctrlrun.config import load_policy_text
from ctrlrun.postgres import PostgresStateStore
from support import failover
from support.pg_replica import ReplicatedCluster
from support.race import preloaded_processes

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCHEMA = "ctrlrun"
WORKERS = 4
UNKNOWN = ("ambiguous_write:", "unrecorded", "store_error:")


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[ReplicatedCluster]:
    replicated = ReplicatedCluster(sync=getattr(request, "param", True)).start()
    try:
        yield replicated
    finally:
        replicated.stop()


def start_workers(cluster: ReplicatedCluster, root: Path) -> list[Any]:
    with psycopg.connect(cluster.primary.url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
    url = cluster.multi_url(ctrlrun_schema=SCHEMA, ctrlrun_commit_timeout="5", connect_timeout="5")
    PostgresStateStore(cluster.primary.url, schema=SCHEMA).close()  # migrated once
    ctx = preloaded_processes()
    workers = [ctx.Process(target=failover.work, args=(url, str(root), i)) for i in range(WORKERS)]
    for worker in workers:
        worker.start()
    failover.wait_for_every_worker(root, WORKERS)
    return workers


def stop_workers(root: Path, workers: list[Any]) -> None:
    (root / "stop").touch()
    for worker in workers:
        worker.join(timeout=30)
    assert [w.exitcode for w in workers] == [0] * WORKERS


def fail_over(cluster: ReplicatedCluster, root: Path) -> None:
    """SIGKILL the primary mid-load, promote the standby, and let 40 more calls succeed."""
    cluster.crash_primary()  # mid-load: the workers are calling continuously
    cluster.promote()
    promoted = failover.count_answers(root, "ok")
    failover.wait_for_answers(root, "ok", promoted + 40)


def effect_states(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT effect_key, state FROM {SCHEMA}.effects").fetchall()
    return {str(key): str(state) for key, state in rows}


def wal_beyond(cluster: ReplicatedCluster, size: int, timeout: float = 30.0) -> None:
    """Wait until the primary has written ``size`` bytes of WAL past this moment."""
    with psycopg.connect(cluster.primary.url, autocommit=True) as conn:
        start = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
        deadline = time.monotonic() + timeout
        while True:
            row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [start])
            if row.fetchone()[0] >= size:  # type: ignore[index]
                return
            assert time.monotonic() < deadline, f"the primary wrote under {size} bytes of WAL"
            time.sleep(0.05)


def terminate_clients(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )


@pytest.mark.timeout(300)
def test_sigkill_the_primary_mid_load_then_its_return(cluster, tmp_path: Path):
    workers = start_workers(cluster, tmp_path)
    try:
        failover.wait_for_answers(tmp_path, "ok", 40)
        fail_over(cluster, tmp_path)

        cluster.restart_old_primary(sync=False)  # writable, timeline 1, nothing fences it
        before = effect_states(cluster.primary.url)
        mark = failover.offsets(tmp_path)
        terminate_clients(cluster.standby.url)  # every worker reconnects: the old one is first
        deadline = time.monotonic() + 30
        while len(failover.answered_since(tmp_path, "stale_timeline", mark)) < WORKERS:
            assert time.monotonic() < deadline, "a worker never met the old primary"
            time.sleep(0.05)
    finally:
        stop_workers(tmp_path, workers)
    assert effect_states(cluster.primary.url) == before  # nothing was written on the old one

    outcome = failover.Outcome.read(tmp_path)
    records = effect_states(cluster.standby.url)
    executed = outcome.executed
    assert outcome.count("write_failed") > 0  # the crash did land mid-load
    assert [k for k, tokens in executed.items() if len(tokens) > 1] == []  # no double
    assert [k for k in executed if records.get(k) == "failed"] == []  # no FAILED-but-executed
    assert [k for k in executed if k not in records] == []  # no lost record
    short = {k for k, state in records.items() if state != "committed"}
    explained = {
        k for k, answers in outcome.answers.items() if any(a.startswith(UNKNOWN) for a in answers)
    }
    assert short <= explained, short - explained  # every record left unsettled was reported
    assert {k for k, a in outcome.answers.items() if "ok" in a} <= {
        k for k, state in records.items() if state == "committed"
    }
    errors = [a for answers in outcome.answers.values() for a in answers if a.startswith("error:")]
    assert errors == []
    new_primary = PostgresStateStore(cluster.standby.url, schema=SCHEMA)
    checks = check_held_receipts(new_primary, outcome.held)
    assert len(checks) >= 80 and {c.status for c in checks} == {HeldStatus.PRESENT}
    new_primary.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cluster", [False], indirect=True, ids=["async"])
def test_an_async_failover_loses_records_and_the_token_absorbs_the_reruns(cluster, tmp_path):
    """What the docs warn: with asynchronous replication, records the primary acknowledged
    after the standby fell behind (its walreceiver frozen) are lost at the failover. A caller
    retrying those keys runs them again — under the same idempotency token as the lost run —
    the chain on the new primary still verifies, and the held receipts name the loss."""
    workers = start_workers(cluster, tmp_path)
    try:
        failover.wait_for_answers(tmp_path, "ok", 40)
        cluster.pause_standby()  # from here the primary acknowledges what the standby lacks
        failover.wait_for_answers(tmp_path, "ok", failover.count_answers(tmp_path, "ok") + 40)
        wal_beyond(cluster, 1 << 20)  # several times what socket buffers could still deliver
        fail_over(cluster, tmp_path)
    finally:
        stop_workers(tmp_path, workers)
    first = failover.Outcome.read(tmp_path)
    records = effect_states(cluster.standby.url)
    lost = sorted(k for k in first.executed if k not in records)
    assert lost, "the frozen standby lost nothing: the test did not test a loss"

    new_primary = PostgresStateStore(cluster.standby.url, schema=SCHEMA)
    control = Control(load_policy_text(failover.POLICY), new_primary)
    rerun: dict[str, str] = {}

    @ctrlrun.protect("pay.send", control=control)
    def send(n: int) -> str:
        rerun[f"pay:{n}"] = ctrlrun.idempotency_token()
        return "sent"

    with ctrlrun.context("retrying-caller"):
        for key in lost:
            send(int(key.split(":")[1]))
    assert sorted(rerun) == lost  # every lost key ran again: a double execution ...
    assert all(first.executed[key] == [token] for key, token in rerun.items())  # ... same token

    assert new_primary.verify_chain().ok  # a lost tail leaves no break
    statuses = {c.status for c in check_held_receipts(new_primary, first.held)}
    assert statuses & {HeldStatus.MISSING, HeldStatus.REPLACED}  # the held copies do not
    new_primary.close()
