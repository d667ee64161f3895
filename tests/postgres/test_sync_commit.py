"""A COMMIT whose durability the server did not confirm, on a real synchronous standby.

The standby's walreceiver is frozen (SIGSTOP), so every COMMIT on the primary waits for it;
the wait is then cancelled from another session (``pg_cancel_backend``), which PostgreSQL
answers with a *successful* COMMIT and a warning, or outlives the store's ``commit_timeout``.
Either way the outcome is unknown: a reservation never runs the executor, an outcome is
``OutcomeUnrecorded``, and a re-read that can confirm replication settles the call.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import anyio
import psycopg
import pytest
from click.testing import CliRunner

import ctrlrun
from ctrlrun import Control
from ctrlrun.cli import main
from ctrlrun.config import load_policy_text
from ctrlrun.errors import (
    AmbiguityReason,
    AmbiguousWrite,
    InvalidArgument,
    OutcomeUnrecorded,
    ReplicationReason,
    ReplicationRefused,
)
from ctrlrun.kernel.effect import EffectState
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store import open_store
from support.pg import replace_url, unique_name
from support.pg_replica import ReplicatedCluster
from support.policies import POLICY

from .conftest import Executor, in_thread

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

KEY = "refund:pay_1"
WAIT = 30.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[ReplicatedCluster]:
    replicated = ReplicatedCluster(sync=True).start()
    try:
        yield replicated
    finally:
        replicated.stop()


@pytest.fixture
def schema_url(cluster: ReplicatedCluster) -> Iterator[tuple[str, str]]:
    cluster.resume_standby()
    cluster.wait_streaming()
    name = unique_name("t_")
    with psycopg.connect(cluster.primary.url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield cluster.primary.url, name
    cluster.resume_standby()


def protected(
    store: PostgresStateStore,
    executor: Any,
    before: Callable[[], None] | None = None,
    key: str = "pay_1",
):
    control = Control(load_policy_text(POLICY), store)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> Any:
        if before is not None:
            before()
        return executor(payment_id=payment_id)

    def call() -> Any:
        with ctrlrun.context("bot"):
            return refund(key, 5)

    return call


def cancel_until_done(cluster: ReplicatedCluster, future: Future[Any]) -> int:
    """Cancel every COMMIT waiting for the standby until ``future`` ends; how many."""
    cancelled: set[int] = set()
    deadline = time.monotonic() + WAIT
    while not future.done() and time.monotonic() < deadline:
        try:
            pids = cluster.waiting_on_sync(timeout=0.5)
        except AssertionError:
            continue
        cluster.cancel(pids)
        cancelled.update(pids)
    return len(cancelled)


def effect_state(url: str, schema: str) -> str | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT state FROM "{schema}".effects WHERE effect_key = %s', [KEY]
        ).fetchone()
    return None if row is None else str(row[0])


def test_a_cancelled_wait_at_reservation_never_runs_the_executor(cluster, schema_url):
    url, schema = schema_url
    store = PostgresStateStore(url, schema=schema)
    executor = Executor()
    call = protected(store, executor)
    cluster.pause_standby()
    future = in_thread(call)
    assert cancel_until_done(cluster, future) >= 1
    with pytest.raises(AmbiguousWrite) as caught:
        future.result(timeout=WAIT)
    assert caught.value.reason is AmbiguityReason.UNREPLICATED
    assert executor.calls == []
    # the reservation did commit on the primary: a store that trusted the warning-laden
    # COMMIT would have run the executor on a record a failover can lose
    assert effect_state(url, schema) == "executing"
    store.close()


def test_a_commit_past_its_bound_is_unknown_and_runs_nothing(cluster, schema_url):
    url, schema = schema_url
    store = PostgresStateStore(url, schema=schema, commit_timeout=0.5)
    executor = Executor()
    call = protected(store, executor)
    cluster.pause_standby()
    started = time.monotonic()
    with pytest.raises(AmbiguousWrite) as caught:
        in_thread(call).result(timeout=WAIT)
    assert caught.value.reason is AmbiguityReason.UNREPLICATED
    assert time.monotonic() - started < 10  # two bounded waits (the COMMIT, the barrier)
    assert executor.calls == []
    store.close()


def test_a_cancelled_wait_at_the_outcome_is_outcome_unrecorded(cluster, schema_url):
    url, schema = schema_url
    store = PostgresStateStore(url, schema=schema)
    executor = Executor()
    call = protected(store, executor, before=cluster.pause_standby)  # after the reservation
    future = in_thread(call)
    assert cancel_until_done(cluster, future) >= 1
    with pytest.raises(OutcomeUnrecorded) as caught:
        future.result(timeout=WAIT)
    assert isinstance(caught.value.__cause__, AmbiguousWrite)
    assert caught.value.__cause__.reason is AmbiguityReason.UNREPLICATED
    assert len(executor.calls) == 1
    store.close()


def test_the_reread_settles_a_cancelled_wait_once_the_standby_confirms(cluster, schema_url, caplog):
    caplog.set_level(logging.INFO, logger="ctrlrun.postgres")
    url, schema = schema_url
    store = PostgresStateStore(url, schema=schema)
    executor = Executor()
    call = protected(store, executor)
    cluster.pause_standby()
    future = in_thread(call)
    first = cluster.waiting_on_sync()
    cluster.cancel(first)  # the reservation's COMMIT: answered with the warning
    deadline = time.monotonic() + WAIT
    while not set(cluster.waiting_on_sync()) - set(first) and time.monotonic() < deadline:
        pass  # the re-read's barrier waits on a connection of its own
    cluster.resume_standby()
    assert future.result(timeout=WAIT) == {"ok": 1}
    assert len(executor.calls) == 1
    assert store.get_effect(KEY).state is EffectState.COMMITTED
    assert [r.branch for r in caplog.records if hasattr(r, "branch")] == ["A1_OURS"]
    store.close()


def test_the_store_reports_the_replication_it_writes_under(cluster, schema_url):
    url, schema = schema_url
    store = PostgresStateStore(url, schema=schema, require_sync=True)
    seen = store.replication
    assert seen is not None and seen.waits_for_standby
    assert (seen.synchronous_commit, seen.synchronous_standby_names) == ("on", "*")
    assert (seen.standbys, seen.sync_standbys, seen.timeline) == (1, 1, 1)
    store.close()


def test_required_sync_refuses_a_commit_that_would_not_wait(cluster, schema_url):
    url, schema = schema_url
    local = url + "&options=-csynchronous_commit%3Dlocal"
    with pytest.raises(ReplicationRefused) as caught:
        open_store(f"{local}&ctrlrun_schema={schema}&ctrlrun_require_sync=true")
    assert caught.value.reason is ReplicationReason.NOT_SYNCHRONOUS
    with psycopg.connect(url, autocommit=True) as conn:  # refused before anything was written
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", [schema]
        ).fetchone()
    assert tables == (0,)
    open_store(f"{local}&ctrlrun_schema={schema}").close()  # not required: it opens


def test_required_sync_refuses_a_server_without_a_synchronous_setting(pg_schema):
    with pytest.raises(ReplicationRefused) as caught:
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema, require_sync=True)
    assert caught.value.reason is ReplicationReason.NOT_SYNCHRONOUS


@pytest.mark.parametrize(
    "param", ["ctrlrun_commit_timeout=0", "ctrlrun_commit_timeout=x", "ctrlrun_require_sync=2"]
)
def test_bad_durability_parameters_are_refused_by_name(pg_schema, param):
    name = param.split("=")[0]
    with pytest.raises(InvalidArgument, match=name):
        open_store(f"{pg_schema.url}&ctrlrun_schema={pg_schema.schema}&{param}")


def test_verify_and_conformance_show_the_replication(cluster, tmp_path):
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    url = cluster.primary.url
    runner = CliRunner()
    verified = runner.invoke(
        main, ["verify", "--policy", str(policy), "--store-url", url, "--only", "G3", "--json"]
    )
    shown = json.loads(verified.stdout)["replication"]
    assert shown["waits_for_standby"] and shown["sync_standbys"] == 1, verified.output
    graded = runner.invoke(main, ["conformance", "--store-url", url, "--only", "binding"])
    assert "replication: synchronous: synchronous_commit=on" in graded.stdout, graded.output


def test_verify_names_a_server_that_is_not_synchronous(pg_server, tmp_path):
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    args = ["verify", "--policy", str(policy), "--store-url", pg_server.url, "--only", "G3"]
    result = CliRunner().invoke(main, args)
    assert "replication: NOT synchronous (a failover can lose committed records)" in result.stdout


def test_the_async_path_never_runs_an_executor_past_an_unconfirmed_commit(cluster, schema_url):
    url, schema = schema_url
    store = PostgresStateStore(url, schema=schema, commit_timeout=0.5)
    control = Control(load_policy_text(POLICY), store)
    ran: list[str] = []

    @ctrlrun.protect("stripe.refund", control=control)
    async def refund(payment_id: str, amount: int) -> str:
        ran.append(payment_id)
        return "refunded"

    async def call() -> str:
        with ctrlrun.context("bot"):
            return await refund("pay_1", 5)

    cluster.pause_standby()
    with pytest.raises(AmbiguousWrite) as caught:
        anyio.run(call)
    assert caught.value.reason is AmbiguityReason.UNREPLICATED
    assert ran == []
    cluster.resume_standby()
    store.close()


def test_a_frozen_backend_cannot_hang_the_caller(pg_schema, branches):
    """The server process of the store's connection is frozen (SIGSTOP) before a call: its
    COMMIT is never answered and no cancel reaches it. At the bound the cancel is sent, two
    seconds later the socket is shut; the re-read, on a new connection, finds nothing landed
    and the reservation is issued again: one execution, committed, in bounded time."""
    store = PostgresStateStore(pg_schema.url, schema=pg_schema.schema, commit_timeout=0.5)
    executor = Executor()
    call = protected(store, executor)
    one = ThreadPoolExecutor(1)  # one thread: one connection, the one that is frozen
    assert one.submit(call).result(timeout=WAIT) == {"ok": 1}
    backend = one.submit(lambda: store._engine.connections.current().info.backend_pid).result()
    os.kill(backend, signal.SIGSTOP)
    try:
        started = time.monotonic()
        second = one.submit(protected(store, executor, key="pay_2"))
        assert second.result(timeout=WAIT) == {"ok": 2}
        assert time.monotonic() - started < 10
    finally:
        os.kill(backend, signal.SIGCONT)
        one.shutdown(wait=False)
    assert [b for b, _ in branches()] == ["A1_REINSERT"]
    assert store.get_effect("refund:pay_2").state is EffectState.COMMITTED
    store.close()


def test_a_role_denied_the_clusters_identity_still_opens(cluster, schema_url, caplog):
    """Some managed services revoke pg_control_system(): the store still opens and reports the
    replication; only the timeline check has nothing to compare (and says so)."""
    url, schema = schema_url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE ROLE app_limited LOGIN")
        conn.execute(f'GRANT USAGE, CREATE ON SCHEMA "{schema}" TO app_limited')
        conn.execute("REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC")
    try:
        store = PostgresStateStore(replace_url(url, user="app_limited"), schema=schema)
        seen = store.replication
        assert seen is not None and seen.waits_for_standby
        assert (seen.timeline, seen.sync_standbys, seen.standbys) == (None, None, 1)
        assert "timeline check is off" in caplog.text
        store.close()
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("GRANT EXECUTE ON FUNCTION pg_control_system() TO PUBLIC")
            conn.execute("DROP OWNED BY app_limited CASCADE")
            conn.execute("DROP ROLE app_limited")
