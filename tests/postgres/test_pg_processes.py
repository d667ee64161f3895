"""Real OS processes against one Postgres: eight race one key behind a barrier (directly, and
through pgbouncer in transaction mode with a two-connection pool); a child killed with
``kill -9`` inside an open write transaction changes nothing.

Each child proves it imported the tree under test; executions are counted with exclusive-create
marker files, so a second execution anywhere fails loudly.
"""

from __future__ import annotations

import multiprocessing as mp
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

from .conftest import KEY

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  stripe.refund:
    effect: "refund:{payment_id}"
    decision: allow
"""
SOURCE = str(Path(ctrlrun.__file__).resolve().parent)


def contend(url: str, schema: str, calls: str, barrier: Any, results: Any) -> None:
    import ctrlrun
    from ctrlrun.postgres import PostgresStateStore

    assert str(Path(ctrlrun.__file__).resolve().parent) == SOURCE  # the tree under test
    store = PostgresStateStore(url, schema=schema)
    control = ctrlrun.Control(ctrlrun.Policy.from_yaml(POLICY), store)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        fd = os.open(os.path.join(calls, "executed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return "refunded"

    barrier.wait(timeout=60)
    with ctrlrun.context(agent=f"agent-{os.getpid()}"):
        try:
            results.put((os.getpid(), refund("pay_1", 5000)))
        except ctrlrun.DuplicateEffect as exc:
            results.put((os.getpid(), f"duplicate:{exc.state}"))
        except BaseException as exc:  # anything else is a finding, reported to the parent
            results.put((os.getpid(), f"error:{type(exc).__name__}:{exc}"))


def processes() -> Any:
    """Fresh OS processes forked from a clean single-threaded server that already imported
    ctrlrun and psycopg, so eight of them do not spend the test importing on two cores."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["ctrlrun", "ctrlrun.postgres", "ctrlrun.store.postgres.atopen"])
    return ctx


def race(url: str, pg_schema: Any, tmp_path: Path) -> list[str]:
    PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()  # migrate once
    calls = tmp_path / "calls"
    calls.mkdir()
    ctx = processes()
    barrier, results = ctx.Barrier(8), ctx.Queue()
    args = (url, pg_schema.schema, str(calls), barrier, results)
    workers = [ctx.Process(target=contend, args=args) for _ in range(8)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=90) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert all(worker.exitcode == 0 for worker in workers)
    assert len({pid for pid, _ in outcomes}) == 8
    assert os.listdir(calls) == ["executed"]
    return sorted(answer for _, answer in outcomes)


def check_one_winner(answers: list[str], pg_schema: Any) -> None:
    assert answers.count("refunded") == 1, answers
    losers = [a for a in answers if a != "refunded"]
    assert set(losers) <= {"duplicate:in_progress", "duplicate:committed"}, answers
    store = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    assert store.get_effect(KEY).state is EffectState.COMMITTED
    results = [r.document["result"] for r in store.receipts()]
    assert results.count("committed") == 1 and results.count("blocked") == 7
    assert store.verify_chain().ok
    store.close()


@pytest.mark.timeout(180)
def test_eight_processes_one_execution(pg_schema, tmp_path):
    check_one_winner(race(pg_schema.url, pg_schema, tmp_path), pg_schema)


@pytest.mark.timeout(180)
def test_eight_processes_one_execution_through_pgbouncer(pg_schema, small_pgbouncer, tmp_path):
    check_one_winner(race(small_pgbouncer.url, pg_schema, tmp_path), pg_schema)


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
    child = processes().Process(
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
