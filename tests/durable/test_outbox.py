"""The outbox on a real SQLite file and on the real test Postgres (``backend``), plus real OS
processes racing a claim (SQLite) and a worker killed with SIGKILL mid-delivery (both)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import threading
from datetime import timedelta

import psycopg
import pytest
from durable_workers import deliver_then_hang, race_outbox_claim
from psycopg import sql

from ctrlrun.durable import Backoff, Dispatcher, MessageStatus, Outbox, Outcome
from ctrlrun.durable.outbox import settle_in_txn
from ctrlrun.errors import ClaimLost, InvalidArgument, NotExecuted, Undeliverable
from ctrlrun.kernel.outbox import Settlement

EXACT = {"jitter": lambda: 1.0, "backoff": Backoff(base=timedelta(seconds=10))}


def app_connection(backend):
    """The application's own connection to the store's database, with an ``orders`` table."""
    if backend.name == "sqlite":
        conn = sqlite3.connect(backend.store.path)
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)")
        conn.commit()
        return conn
    conn = psycopg.connect(backend.url)
    conn.execute(
        sql.SQL("CREATE TABLE {}.orders (id integer PRIMARY KEY)").format(
            sql.Identifier(backend.store.schema)
        )
    )
    conn.commit()
    return conn


def insert_order(backend, conn, order_id):
    if backend.name == "sqlite":
        conn.execute("INSERT INTO orders (id) VALUES (?)", (order_id,))
    else:
        conn.execute(
            sql.SQL("INSERT INTO {}.orders (id) VALUES (%s)").format(
                sql.Identifier(backend.store.schema)
            ),
            (order_id,),
        )


class TestEnqueue:
    def test_the_message_commits_or_rolls_back_with_the_callers_row(self, backend):
        outbox, conn = Outbox(backend.store), app_connection(backend)
        insert_order(backend, conn, 1)
        outbox.enqueue_in_txn(conn, "order.created", {"order": 1})
        conn.rollback()
        assert outbox.list() == ()
        assert backend.sql("SELECT count(*) AS n FROM {t}orders")[0]["n"] == 0
        insert_order(backend, conn, 2)
        message_id = outbox.enqueue("order.created", {"order": 2}, conn=conn)  # same, by keyword
        assert outbox.get(message_id) is None  # not visible before the caller commits
        conn.commit()
        assert [m.payload for m in outbox.list()] == [{"order": 2}]
        assert backend.sql("SELECT count(*) AS n FROM {t}orders")[0]["n"] == 1
        conn.close()

    def test_a_dedupe_key_returns_the_first_message(self, backend):
        outbox, conn = Outbox(backend.store), app_connection(backend)
        first = outbox.enqueue_in_txn(conn, "t", {"n": 1}, key="k")
        again = outbox.enqueue_in_txn(conn, "t", {"n": 2}, key="k")
        conn.commit()
        other_topic = outbox.enqueue("u", {"n": 3}, key="k")
        assert first == again != other_topic
        assert outbox.enqueue("t", {"n": 4}, key="k") == first
        # a frozen clock stamps both alike, so compare without their order
        assert sorted(m.payload["n"] for m in outbox.list()) == [1, 3]
        conn.close()

    def test_an_autocommit_connection_is_refused(self, backend):
        if backend.name == "sqlite":
            conn = sqlite3.connect(backend.store.path, isolation_level=None)
        else:
            conn = psycopg.connect(backend.url, autocommit=True)
        outbox = Outbox(backend.store)
        with pytest.raises(InvalidArgument, match="autocommit"):
            outbox.enqueue("t", {}, conn=conn)
        conn.close()
        assert outbox.list() == ()  # refused before anything was written

    def test_floats_are_refused(self, sqlite_backend):
        with pytest.raises(InvalidArgument, match="float"):
            Outbox(sqlite_backend.store).enqueue("t", {"amount": 1.5})


class TestClaim:
    def test_two_workers_race_one_message_and_one_wins(self, backend):
        Outbox(backend.store).enqueue("t", {})
        stores = [backend.fresh(), backend.fresh()]
        barrier, claimed = threading.Barrier(2), []

        def worker(store):
            dispatcher = Dispatcher(store, lambda m: None, batch=1)
            barrier.wait(timeout=30)
            claimed.append(dispatcher.claim())

        threads = [threading.Thread(target=worker, args=(s,)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(len(c) for c in claimed) == [0, 1]
        (message,) = [m for c in claimed for m in c]
        assert message.attempts == 1 and message.status is MessageStatus.PROCESSING
        for store in stores:
            store.close()

    def test_a_reclaimed_worker_cannot_settle(self, backend):
        """Worker A is paused inside its handler past its lease; B reclaims and delivers;
        A's settle matches no row (attempts moved on) and is refused."""
        outbox = Outbox(backend.store)
        message_id = outbox.enqueue("t", {})
        inside, release = threading.Event(), threading.Event()
        results = {}

        def paused(message):
            inside.set()
            assert release.wait(timeout=30)  # the explicit pause point

        a = Dispatcher(backend.store, paused, worker="A")
        thread = threading.Thread(target=lambda: results.setdefault("a", a.run_once()))
        thread.start()
        assert inside.wait(timeout=30)
        backend.lapse("outbox", "message_id", message_id, "lease_expires_at")
        other = backend.fresh()
        b = Dispatcher(other, lambda m: None, worker="B")
        (delivery,) = b.run_once()
        assert (delivery.attempts, delivery.status) == (2, MessageStatus.SENT)
        release.set()
        thread.join(timeout=30)
        (late,) = results["a"]
        assert late.fenced and late.attempts == 1 and late.outcome is Outcome.SENT
        final = outbox.get(message_id)
        assert (final.status, final.attempts, final.claimed_by) == (MessageStatus.SENT, 2, "B")
        other.close()

    def test_the_fence_is_the_row_count(self, backend):
        outbox = Outbox(backend.store)
        outbox.enqueue("t", {})
        (claimed,) = Dispatcher(backend.store, lambda m: None).claim()
        backend.lapse("outbox", "message_id", claimed.message_id, "lease_expires_at")
        Dispatcher(backend.store, lambda m: None).claim()  # reclaimed: attempts is 2 now
        sent = Settlement(MessageStatus.SENT, None, None)
        landed = backend.store.transact(lambda txn: settle_in_txn(txn, claimed, sent, strict=False))
        assert landed is False
        with pytest.raises(ClaimLost) as caught:
            backend.store.transact(lambda txn: settle_in_txn(txn, claimed, sent))
        assert (caught.value.kind, caught.value.claim) == ("outbox", 1)
        assert outbox.get(claimed.message_id).status is MessageStatus.PROCESSING


class TestRetries:
    def test_backoff_spacing_then_dead(self, backend):
        outbox = Outbox(backend.store)
        message_id = outbox.enqueue("t", {})
        tokens = []

        def flaky(message):
            tokens.append(message.token)
            raise NotExecuted("connection refused")

        dispatcher = Dispatcher(backend.store, flaky, max_attempts=3, **EXACT)
        delays = []
        for attempt in (1, 2, 3):
            (delivery,) = dispatcher.run_once()
            assert delivery.attempts == attempt and delivery.outcome is Outcome.NOT_EXECUTED
            message = outbox.get(message_id)
            delays.append(message.next_attempt_at - message.updated_at)
            assert dispatcher.run_once() == ()  # not due yet
            backend.lapse("outbox", "message_id", message_id, "next_attempt_at")
        assert delays[:2] == [timedelta(seconds=10), timedelta(seconds=20)]
        final = outbox.get(message_id)
        assert final.status is MessageStatus.DEAD and final.attempts == 3
        assert "connection refused" in final.last_error and final.finished_at is not None
        assert len(set(tokens)) == 1 and len(tokens) == 3  # one stable token per message

    def test_jitter_spreads_within_half_to_whole(self, sqlite_backend, clock):
        outbox = Outbox(sqlite_backend.store)
        message_id = outbox.enqueue("t", {})

        def refuse(message):
            raise NotExecuted

        dispatcher = Dispatcher(
            sqlite_backend.store,
            refuse,
            jitter=lambda: 0.0,
            backoff=Backoff(base=timedelta(seconds=8)),
        )
        dispatcher.run_once()
        assert outbox.get(message_id).next_attempt_at == clock() + timedelta(seconds=4)

    def test_undeliverable_fails_without_retry(self, backend):
        outbox = Outbox(backend.store)
        message_id = outbox.enqueue("t", {})

        def reject(message):
            raise Undeliverable("no such address")

        (delivery,) = Dispatcher(backend.store, reject).run_once()
        assert delivery.status is MessageStatus.FAILED
        assert outbox.get(message_id).status is MessageStatus.FAILED

    def test_an_unknown_outcome_is_retried_on_a_retry_topic(self, backend):
        outbox = Outbox(backend.store)
        message_id = outbox.enqueue("mail", {})
        calls = []

        def timeout(message):
            calls.append(message.attempts)
            raise TimeoutError("no reply")

        (delivery,) = Dispatcher(backend.store, timeout, **EXACT).run_once()
        assert delivery.outcome is Outcome.UNKNOWN and delivery.status is MessageStatus.PENDING
        assert outbox.get(message_id).last_error == "TimeoutError: no reply"


class TestParking:
    def test_an_unknown_outcome_is_parked_not_resent(self, backend):
        outbox = Outbox(backend.store)
        message_id = outbox.enqueue("pay", {"amount": 500})
        calls = []

        def timeout(message):
            calls.append(message.attempts)
            raise TimeoutError("no reply")

        dispatcher = Dispatcher(backend.store, timeout, on_unknown={"pay": "park"}, **EXACT)
        (delivery,) = dispatcher.run_once()
        assert delivery.status is MessageStatus.AMBIGUOUS
        backend.lapse("outbox", "message_id", message_id, "next_attempt_at")
        assert dispatcher.run_once() == ()
        assert calls == [1]
        resolved = outbox.resolve(message_id, "pending", resolver="alice")
        assert resolved.status is MessageStatus.PENDING and "alice" in resolved.last_error
        (again,) = Dispatcher(backend.store, lambda m: calls.append(m.attempts)).run_once()
        assert again.status is MessageStatus.SENT and calls == [1, 2]

    def test_a_lapsed_claim_on_a_parking_topic_is_parked(self, backend):
        outbox = Outbox(backend.store)
        message_id = outbox.enqueue("pay", {})
        Dispatcher(backend.store, lambda m: None).claim()  # a worker that then vanished
        backend.lapse("outbox", "message_id", message_id, "lease_expires_at")
        calls = []
        dispatcher = Dispatcher(backend.store, calls.append, on_unknown="park")
        assert dispatcher.run_once() == ()
        message = outbox.get(message_id)
        assert message.status is MessageStatus.AMBIGUOUS and "lapsed" in message.last_error
        assert calls == []
        with pytest.raises(InvalidArgument):
            outbox.resolve(message_id, "dead", resolver="alice")
        assert outbox.resolve(message_id, "sent", resolver="alice").status is MessageStatus.SENT

    def test_a_lapsed_claim_at_its_last_attempt_is_dead(self, sqlite_backend, clock):
        outbox = Outbox(sqlite_backend.store)
        message_id = outbox.enqueue("t", {})
        Dispatcher(sqlite_backend.store, lambda m: None, max_attempts=1).claim()
        clock.advance(timedelta(minutes=6))
        assert Dispatcher(sqlite_backend.store, lambda m: None, max_attempts=1).run_once() == ()
        assert outbox.get(message_id).status is MessageStatus.DEAD


@pytest.mark.postgres
def test_postgres_claims_skip_locked_rows(pg_schema):
    """A claim holding its transaction open (the pause point) does not block another
    connection's claim: the second skips the locked row and takes the next one."""
    from ctrlrun.postgres import PostgresStateStore

    store, other = PostgresStateStore(pg_schema.url, schema=pg_schema.schema), None
    try:
        outbox = Outbox(store)
        first, second = outbox.enqueue("t", {"n": 1}), outbox.enqueue("t", {"n": 2})
        other = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
        holding, release, got = threading.Event(), threading.Event(), {}
        a = Dispatcher(store, lambda m: None, batch=1)

        def hold():
            def work(txn):
                from ctrlrun.durable.outbox import claim_in_txn

                claimed = claim_in_txn(
                    txn,
                    worker="A",
                    topics=None,
                    batch=1,
                    lease=timedelta(minutes=5),
                    max_attempts=5,
                    on_unknown={},
                    default_unknown=a._default,
                )
                holding.set()
                assert release.wait(timeout=30)
                return claimed

            got["a"] = store.transact(work)

        thread = threading.Thread(target=hold)
        thread.start()
        assert holding.wait(timeout=30)
        got["b"] = Dispatcher(other, lambda m: None, batch=1).claim()  # would block without SKIP
        release.set()
        thread.join(timeout=30)
        assert [m.message_id for m in got["a"]] == [first]
        assert [m.message_id for m in got["b"]] == [second]
    finally:
        store.close()
        if other is not None:
            other.close()


@pytest.mark.slow
def test_four_processes_race_one_message(sqlite_backend, tmp_path):
    message_id = Outbox(sqlite_backend.store).enqueue("t", {})
    calls = tmp_path / "calls"
    calls.mkdir()
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    args = (str(sqlite_backend.store.path), str(calls), barrier, results)
    workers = [ctx.Process(target=race_outbox_claim, args=args) for _ in range(4)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    assert sorted(len(ids) for _, ids in outcomes) == [0, 0, 0, 1]
    assert os.listdir(calls) == [f"sent-{message_id}"]
    assert Outbox(sqlite_backend.store).get(message_id).status is MessageStatus.SENT


@pytest.mark.slow
@pytest.mark.parametrize(("topic", "then"), [("mail", "resent"), ("pay", "parked")])
def test_kill_9_mid_delivery(backend, tmp_path, topic, then):
    """SIGKILL while the child is inside the handler (after the send): a retry topic re-sends
    after the lease (at-least-once); a parking topic parks it and never re-sends."""
    outbox = Outbox(backend.store)
    message_id = outbox.enqueue(topic, {})
    calls = tmp_path / "calls"
    calls.mkdir()
    ctx = mp.get_context("spawn")
    inside = ctx.Event()
    child = ctx.Process(target=deliver_then_hang, args=(backend.spec, str(calls), inside, topic))
    child.start()
    assert inside.wait(timeout=60)
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL
    assert outbox.get(message_id).status is MessageStatus.PROCESSING  # until the lease lapses
    backend.pass_time(timedelta(minutes=6))

    def second_send(message):
        (calls / f"{topic}-2").touch(exist_ok=False)

    park = {"pay": "park"}
    deliveries = Dispatcher(backend.store, second_send, on_unknown=park).run_once()
    message = outbox.get(message_id)
    if then == "resent":
        assert [d.status for d in deliveries] == [MessageStatus.SENT]
        assert sorted(os.listdir(calls)) == [f"{topic}-1", f"{topic}-2"]
        assert message.attempts == 2
    else:
        assert deliveries == () and message.status is MessageStatus.AMBIGUOUS
        assert os.listdir(calls) == [f"{topic}-1"]
