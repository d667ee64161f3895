"""Long-running operations on a real SQLite file and the real test Postgres (``backend``), plus
real OS processes racing the start (SQLite) and a starter killed with SIGKILL (both)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from datetime import timedelta

import pytest
from durable_workers import race_operation_start, start_then_hang

from ctrlrun.durable import Operations, OperationStatus, PollResult, PollState
from ctrlrun.errors import ClaimLost, InvalidArgument, NotExecuted, OperationInFlight


class Remote:
    """A fake provider of long operations: counts starts, finds them by start token."""

    def __init__(self) -> None:
        self.starts: list[str] = []
        self.by_token: dict[str, str] = {}

    def start(self, operation):
        self.starts.append(operation.operation_id)
        remote_id = f"remote-{len(self.starts)}"
        self.by_token[operation.start_token] = remote_id
        return remote_id


@pytest.fixture
def remote():
    return Remote()


class TestSubmit:
    def test_an_idempotency_key_returns_the_existing_operation(self, backend):
        ops = Operations(backend.store)
        first = ops.submit("branch.reset", "db:main", {"to": "snap-1"}, idempotency_key="k1")
        again = ops.submit("branch.reset", "db:main", {"to": "snap-1"}, idempotency_key="k1")
        assert first.operation_id == again.operation_id and len(ops.list()) == 1
        with pytest.raises(InvalidArgument, match="other arguments"):
            ops.submit("branch.reset", "db:main", {"to": "snap-2"}, idempotency_key="k1")

    def test_one_operation_in_flight_per_resource(self, backend, remote):
        ops = Operations(backend.store)
        first = ops.submit("branch.reset", "db:main")
        with pytest.raises(OperationInFlight) as caught:
            ops.submit("branch.reset", "db:main", idempotency_key="other")
        assert caught.value.operation_id == first.operation_id
        ops.start(first.operation_id, remote.start)
        with pytest.raises(OperationInFlight):
            ops.submit("branch.reset", "db:main")
        ops.poll(first.operation_id, lambda op: PollResult(PollState.SUCCEEDED))
        assert ops.submit("branch.reset", "db:main").status is OperationStatus.QUEUED

    def test_only_a_queued_operation_is_canceled(self, backend, remote):
        ops = Operations(backend.store)
        queued = ops.submit("branch.reset", "db:a")
        assert ops.cancel(queued.operation_id, reason="not needed").status is (
            OperationStatus.CANCELED
        )
        running = ops.submit("branch.reset", "db:b")
        ops.start(running.operation_id, remote.start)
        with pytest.raises(InvalidArgument, match="only a queued"):
            ops.cancel(running.operation_id, reason="too late")


class TestStart:
    def test_two_workers_race_the_start_and_it_is_issued_once(self, backend, remote):
        operation = Operations(backend.store).submit("branch.reset", "db:main")
        barrier, lock = threading.Barrier(2), threading.Lock()

        def starter(op):
            with lock:
                return remote.start(op)

        def worker():
            ops = Operations(backend.fresh())
            barrier.wait(timeout=30)
            ops.start(operation.operation_id, starter)

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert remote.starts == [operation.operation_id]
        final = Operations(backend.store).get(operation.operation_id)
        assert (final.status, final.remote_id, final.claimed_by) == (
            OperationStatus.RUNNING,
            "remote-1",
            None,
        )

    def test_a_started_operation_is_never_started_again(self, backend, remote):
        ops = Operations(backend.store)
        operation = ops.submit("branch.reset", "db:main")
        ops.start(operation.operation_id, remote.start)
        again = ops.start(operation.operation_id, remote.start)
        assert again.remote_id == "remote-1" and remote.starts == [operation.operation_id]

    def test_not_executed_fails_the_operation(self, backend):
        ops = Operations(backend.store)
        operation = ops.submit("branch.reset", "db:main")

        def refused(op):
            raise NotExecuted("quota")

        failed = ops.start(operation.operation_id, refused)
        assert failed.status is OperationStatus.FAILED and "quota" in failed.error

    def test_an_unknown_start_is_found_by_its_token_never_reissued(self, backend, remote):
        ops = Operations(backend.store)
        operation = ops.submit("branch.reset", "db:main")

        def lost_reply(op):
            remote.start(op)
            raise TimeoutError("no reply")

        flagged = ops.start(operation.operation_id, lost_reply)
        assert flagged.status is OperationStatus.RUNNING and flagged.remote_id is None
        assert flagged.reconcile and "TimeoutError" in flagged.error
        ops.start(operation.operation_id, remote.start)  # a blind retry: nothing is issued

        def find(op):
            return PollResult(PollState.RUNNING, remote_id=remote.by_token.get(op.start_token))

        found = ops.poll(operation.operation_id, find)
        assert (found.remote_id, found.reconcile) == ("remote-1", None)
        done = ops.poll(operation.operation_id, lambda op: PollResult(PollState.SUCCEEDED, 7))
        assert (done.status, done.result) == (OperationStatus.SUCCEEDED, 7)
        assert remote.starts == [operation.operation_id]

    def test_an_unknown_start_can_be_settled_as_never_started(self, backend):
        ops = Operations(backend.store)
        operation = ops.submit("branch.reset", "db:main")

        def lost(op):
            raise ConnectionResetError

        ops.start(operation.operation_id, lost)
        settled = ops.resolve_start(operation.operation_id, resolver="alice")
        assert settled.status is OperationStatus.FAILED and "alice" in settled.error
        with pytest.raises(InvalidArgument):
            ops.resolve_start(operation.operation_id, resolver="alice")


class TestPoll:
    def test_a_poller_whose_claim_was_taken_over_cannot_write(self, backend, remote):
        ops = Operations(backend.store, worker="A")
        operation = ops.submit("branch.reset", "db:main")
        ops.start(operation.operation_id, remote.start)
        inside, release, results = threading.Event(), threading.Event(), {}

        def paused(op):
            inside.set()
            assert release.wait(timeout=30)  # the explicit pause point
            return PollResult(PollState.FAILED, error="late answer")

        def poll_a():
            try:
                results["a"] = ops.poll(operation.operation_id, paused)
            except ClaimLost as exc:
                results["a"] = exc

        thread = threading.Thread(target=poll_a)
        thread.start()
        assert inside.wait(timeout=30)
        b = Operations(backend.fresh(), worker="B")
        assert b.poll(operation.operation_id, lambda op: PollResult(PollState.RUNNING)).polls == 1
        backend.lapse("operations", "operation_id", operation.operation_id, "lease_expires_at")
        done = b.poll(operation.operation_id, lambda op: PollResult(PollState.SUCCEEDED, "ok"))
        assert done.status is OperationStatus.SUCCEEDED and done.claim_epoch == 3
        release.set()
        thread.join(timeout=30)
        assert isinstance(results["a"], ClaimLost) and results["a"].claim == 2
        final = ops.get(operation.operation_id)
        assert (final.status, final.result, final.error) == (OperationStatus.SUCCEEDED, "ok", None)

    def test_reap_moves_abandoned_operations_on_without_restarting(self, backend, remote):
        ops = Operations(backend.store)
        known = ops.submit("branch.reset", "db:a")
        ops.start(known.operation_id, remote.start)
        ops.poll(known.operation_id, lambda op: PollResult(PollState.RUNNING))
        unknown = ops.submit("branch.reset", "db:b")
        # a starter that died mid-start: claimed running, no remote id recorded
        backend.store.transact(
            lambda txn: ops._claim_in_txn(
                txn, unknown.operation_id, OperationStatus.QUEUED, "op_claim_start"
            )
        )
        backend.sql(
            "UPDATE {t}operations SET claimed_by = 'dead' WHERE operation_id = :id",
            {"id": known.operation_id},
        )
        backend.lapse("operations", "operation_id", known.operation_id, "lease_expires_at")
        backend.lapse("operations", "operation_id", unknown.operation_id, "lease_expires_at")
        moved = {op.operation_id: op for op in ops.reap()}
        assert set(moved) == {known.operation_id, unknown.operation_id}
        assert moved[known.operation_id].claimed_by is None
        assert moved[known.operation_id].reconcile is None
        assert (
            moved[unknown.operation_id].reconcile and "reaped" in moved[unknown.operation_id].error
        )
        assert all(op.status is OperationStatus.RUNNING for op in moved.values())
        assert ops.reap() == ()
        ops.start(unknown.operation_id, remote.start)
        assert remote.starts == [known.operation_id]


@pytest.mark.slow
def test_four_processes_race_the_start(sqlite_backend, tmp_path):
    operation = Operations(sqlite_backend.store).submit("branch.reset", "db:main")
    calls = tmp_path / "calls"
    calls.mkdir()
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    args = (str(sqlite_backend.store.path), str(calls), operation.operation_id, barrier, results)
    workers = [ctx.Process(target=race_operation_start, args=args) for _ in range(4)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    assert sorted(started for _, started in outcomes) == [False, False, False, True]
    assert os.listdir(calls) == [f"start-{operation.operation_id}"]


@pytest.mark.slow
def test_kill_9_mid_start_is_never_reissued(backend, tmp_path):
    """SIGKILL inside the starter (after the remote call): after the lease, reap flags the
    unknown start; a retry does not issue it again; the poller finds it by its token."""
    ops = Operations(backend.store)
    operation = ops.submit("branch.reset", "db:main", idempotency_key="reset-1")
    calls = tmp_path / "calls"
    calls.mkdir()
    ctx = mp.get_context("spawn")
    inside = ctx.Event()
    child = ctx.Process(
        target=start_then_hang,
        args=(backend.spec, str(calls), operation.operation_id, inside),
    )
    child.start()
    assert inside.wait(timeout=60)
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    assert ops.reap() == ()  # its lease is still live
    backend.pass_time(timedelta(minutes=6))
    (reaped,) = ops.reap()
    assert reaped.reconcile and reaped.remote_id is None
    again = ops.submit("branch.reset", "db:main", idempotency_key="reset-1")
    assert again.operation_id == operation.operation_id

    def must_not_start(op):
        raise AssertionError("re-issued")

    ops.start(operation.operation_id, must_not_start)
    found = ops.poll(
        operation.operation_id,
        lambda op: PollResult(PollState.SUCCEEDED, "done", remote_id="remote-9"),
    )
    assert (found.status, found.remote_id) == (OperationStatus.SUCCEEDED, "remote-9")
    assert os.listdir(calls) == [f"start-{operation.operation_id}"]
