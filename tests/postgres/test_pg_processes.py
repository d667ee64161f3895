"""Real OS processes against one Postgres: eight race one key behind a barrier (directly, and
through pgbouncer in transaction mode with a two-connection pool); a child killed with
``kill -9`` inside an open write transaction changes nothing.

The racers are ``support.race`` (shared with the SQLite race): each proves it imported the tree
under test, and executions are counted with exclusive-create marker files.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import ctrlrun
from ctrlrun.kernel.effect import EffectState
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store.protocol import StartRequest
from support.policies import POLICY
from support.race import preloaded_processes, race

from .conftest import KEY

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

KEY_RACED = "refund:pay_race"


def race_on(url: str, pg_schema: Any, tmp_path: Path) -> None:
    PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()  # migrate once
    policy, calls = tmp_path / "ctrlrun.yaml", tmp_path / "calls"
    policy.write_text(POLICY)
    calls.mkdir()
    separator = "&" if "?" in url else "?"
    race(preloaded_processes(), f"{url}{separator}ctrlrun_schema={pg_schema.schema}", policy, calls)
    store = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    assert store.get_effect(KEY_RACED).state is EffectState.COMMITTED
    results = [r.document["result"] for r in store.receipts()]
    assert results.count("committed") == 1 and results.count("blocked") == 7
    assert store.verify_chain().ok
    store.close()


@pytest.mark.timeout(180)
def test_eight_processes_one_execution(pg_schema, tmp_path):
    race_on(pg_schema.url, pg_schema, tmp_path)


@pytest.mark.timeout(180)
def test_eight_processes_one_execution_through_pgbouncer(pg_schema, small_pgbouncer, tmp_path):
    race_on(small_pgbouncer.url, pg_schema, tmp_path)


def hold_open_write(url: str, schema: str, ready: str) -> None:
    """A child inside a store write transaction: the outcome written, the COMMIT not sent."""
    from ctrlrun.postgres import PostgresStateStore
    from ctrlrun.store.ops.effects import finish_effect_in_txn

    store = PostgresStateStore(url, schema=schema)
    store.start_action(StartRequest(action_id="act_child", effect_key=KEY))

    def work(txn: Any) -> None:
        finish_effect_in_txn(
            txn,
            effect_key=KEY,
            action_id="act_child",
            attempt=1,
            outcome=EffectState.COMMITTED,
            result={"refund": "re_1"},
            error=None,
        )
        pid = store._engine.connections.current().info.backend_pid  # this transaction's
        fd = os.open(ready, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # readiness, no pipes
        os.write(fd, str(pid).encode())
        os.close(fd)
        signal.pause()  # until killed

    store.transact(work)


def wait_until(predicate: Any, timeout: float = 30.0) -> None:
    """Poll a condition (bounded): waiting for a state, never sleeping to hit a race."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.02)


def probe_update(pg_schema: Any) -> None:
    """An UPDATE of the key's row that gives up after 750 ms if the row is locked."""
    with pg_schema.connect() as conn, conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '750ms'")
        conn.execute("UPDATE effects SET attempt = attempt WHERE effect_key = %s", [KEY])


@pytest.mark.timeout(120)
def test_kill_9_inside_an_open_write_transaction_changes_nothing(pg_schema, tmp_path):
    PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
    ready = tmp_path / "ready"
    child = preloaded_processes().Process(
        target=hold_open_write, args=(pg_schema.url, pg_schema.schema, str(ready))
    )
    child.start()
    try:
        wait_until(ready.exists)
        wait_until(lambda: ready.read_text() != "")
        backend = int(ready.read_text())
        with pytest.raises(psycopg.errors.LockNotAvailable):
            probe_update(pg_schema)  # the child's transaction really is open, holding the row
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    assert child.exitcode == -signal.SIGKILL
    with pg_schema.connect() as conn:
        wait_until(
            lambda: (
                conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [backend]).fetchone()
                is None
            )
        )
    probe_update(pg_schema)  # the lock is free
    store = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    record = store.get_effect(KEY)
    assert (record.state, record.action_id, record.result) == (
        EffectState.EXECUTING,
        "act_child",
        None,
    )
    assert store.receipts() == ()
    with pytest.raises(ctrlrun.DuplicateEffect):
        store.start_action(StartRequest(action_id="act_next", effect_key=KEY))
    store.close()
