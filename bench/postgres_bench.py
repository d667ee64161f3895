"""Postgres benchmarks: every workload measures the floor and ctrlrun in the same run.

Run with ``make bench`` (after the SQLite benchmarks) or ``python postgres_bench.py`` from this
directory. The server is ``$CTRLRUN_BENCH_POSTGRES_URL`` (a superuser URL; a scratch schema per
workload is created and dropped) or a throwaway embedded cluster. ``--quick`` shortens every
workload (a smoke run, not a measurement). Exit 1 when a target is missed.

Targets (ratios in the same run): one-client protected call with an effect key at most 2x the floor;
eight processes on distinct keys ≥ 4,000 protected calls/s; the same one-client call under
the agent's role within 10% of the owner's (``--only roles``, decision 0024).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pg_common
import pg_roles
import pg_workers
from pg_common import Floor, interleaved, show

import ctrlrun
from ctrlrun.durable import Dispatcher, Outbox, PlanRunner, Plans, Steps


def one_client(url: str, ops: int, rounds: int) -> bool:
    """Protected calls with and without an effect key, and an approval-consuming call."""
    ok = True
    with tempfile.TemporaryDirectory() as workdir:
        schema = pg_common.new_schema(url, "b_one")
        try:
            ctl = pg_common.control(url, schema, Path(workdir))  # before the floor's tables
            floor = Floor(url, schema)
            with ctrlrun.context(agent="bench"):
                ok &= _effect_calls(floor, ctl, ops, rounds)
                _no_effect_calls(floor, ctl, ops, rounds)
                _approved_calls(floor, ctl, ops, rounds)
                _round_trips(ctl)
            floor.close()
            ctl.store.close()  # type: ignore[attr-defined]
        finally:
            pg_common.drop_schema(url, schema)
    return ok


def _effect_calls(floor: Floor, ctl: ctrlrun.Control, ops: int, rounds: int) -> bool:
    @ctrlrun.protect("bench.effect", control=ctl)
    def act(n: str) -> str:  # ``bench:{n}`` takes text (decision 0026)
        return n

    pair = interleaved(floor.call, lambda i: act(str(i)), ops=ops, rounds=rounds)
    return show(
        "Postgres, protected call with an effect key, one client",
        pair,
        target=2,
        floor_name="2 committed round trips (INSERT … ON CONFLICT DO NOTHING, autocommit)",
    )


def _no_effect_calls(floor: Floor, ctl: ctrlrun.Control, ops: int, rounds: int) -> None:
    @ctrlrun.protect("bench.read", control=ctl)
    def act(n: int) -> int:
        return n

    pair = interleaved(floor.call, act, ops=ops, rounds=rounds)
    show(
        "Postgres, protected call without an effect, one client",
        pair,
        target=None,
        floor_name="2 committed round trips",
    )


def _approved_calls(floor: Floor, ctl: ctrlrun.Control, ops: int, rounds: int) -> None:
    """The call that consumes a granted approval (requests and grants made beforehand, outside
    the timing: they are a person's work, not the agent's hot path)."""

    @ctrlrun.protect("bench.approved", control=ctl)
    def act(n: str) -> str:  # ``approved:{n}`` takes text (decision 0026)
        return n

    granted: dict[int, str] = {}

    def grant(n: int) -> None:
        try:
            act(str(n))
        except ctrlrun.ApprovalRequired as asked:
            ctl.store.grant_approval(asked.request_id, "bench")
            granted[n] = asked.request_id

    total = 100 + ops * rounds  # warmup + every round
    for n in range(total):
        grant(n)

    def use(n: int) -> None:
        with ctrlrun.with_approval(granted[n]):
            act(str(n))

    pair = interleaved(floor.call, use, ops=ops, rounds=rounds)
    show(
        "Postgres, approval-consuming protected call (approval granted beforehand)",
        pair,
        target=None,
        floor_name="2 committed round trips",
    )


def _round_trips(ctl: ctrlrun.Control) -> None:
    """Round trips and write transactions of one protected call, counted on the wire."""
    store = ctl.store

    @ctrlrun.protect("bench.effect", control=ctl)
    def act(n: str) -> str:
        return n

    act("rt-warm")
    conn = store._engine.connections.current()  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as tmp:
        trips = pg_common.RoundTrips(conn, Path(tmp) / "trace")
        before = store.write_transactions  # type: ignore[attr-defined]
        act("rt-counted")
        count, statements = trips.stop()
    writes = store.write_transactions - before  # type: ignore[attr-defined]
    print(
        f"  one protected call with an effect key: {count} round trips, {statements}"
        f" statements, {writes} write txns"
    )


_KINDS = {
    "floor": "",
    "chain": "floor whose record also advances one head row",
    "ctrlrun": "",
    "sharded": "ctrlrun, a schema (and so a chain) per process",
}


def processes(url: str, window: float, repeats: int) -> bool:
    """Eight processes on distinct keys, floor and ctrlrun alternating, ``repeats`` each."""
    runs: dict[str, list[pg_workers.Throughput]] = {k: [] for k in _KINDS}
    for _ in range(repeats):
        for kind in _KINDS:
            runs[kind].append(pg_workers.distinct_keys(url, kind, window))
    f, o = (statistics.median(t.per_second for t in runs[k]) for k in ("floor", "ctrlrun"))
    ok = o >= 4000  # one schema, one chain: as a user deploys by default
    print(f"Postgres, {pg_workers.PROCESSES} processes on distinct keys ({window:g} s windows)")
    for kind, label in _KINDS.items():
        print(_throughput_line(kind, runs[kind], label))
    print(
        f"  ratio   {f / o:9.2f}× the floor's time per call   target ≥ 4000/s   "
        f"{'OK' if ok else 'MISSED'}"
    )
    return ok


def _throughput_line(kind: str, runs: list[pg_workers.Throughput], label: str) -> str:
    rate = statistics.median(t.per_second for t in runs)
    cpus = [t.cpu_us for t in runs if t.cpu_us is not None]
    cpu = f"machine CPU {statistics.median(cpus):4.0f} µs/call" if cpus else ""
    listed = ", ".join(f"{t.per_second:.0f}" for t in runs)
    return f"  {kind:8s}{rate:9.0f} calls/s  (runs {listed})  {cpu}  {label}".rstrip()


def contended(url: str, rounds: int) -> None:
    floor = pg_workers.one_key(url, "floor", rounds)
    ours = pg_workers.one_key(url, "ctrlrun", rounds)
    print(f"Postgres, {pg_workers.PROCESSES} processes on ONE key, {rounds} rounds (medians)")
    for name, c in (("floor", floor), ("ctrlrun", ours)):
        one = "exactly one winner every round" if c.winners_ok else "WINNER COUNT WRONG"
        print(
            f"  {name:7} winner {c.winner_ms:6.2f} ms  slowest loser {c.last_loser_ms:6.2f} ms"
            f"  any loser {c.loser_ms:6.2f} ms  ({one})"
        )


def durable(url: str, messages: int, steps: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        schema = pg_common.new_schema(url, "b_durable")
        try:
            ctl = pg_common.control(url, schema, Path(workdir))  # before the floor's tables
            floor = Floor(url, schema)
            _outbox(floor, ctl, messages)
            _plan(floor, ctl, steps)
            floor.close()
            ctl.store.close()  # type: ignore[attr-defined]
        finally:
            pg_common.drop_schema(url, schema)


def _timed(op: Callable[[int], None], n: int, start: int = 0) -> float:
    t = time.perf_counter()
    for i in range(start, start + n):
        op(i)
    return time.perf_counter() - t


def _outbox(floor: Floor, ctl: ctrlrun.Control, messages: int) -> None:
    """Enqueue (the store's own transaction) then dispatch in batches of 10, per message."""
    outbox = Outbox(ctl.store)  # type: ignore[arg-type]
    dispatcher = Dispatcher(ctl.store, lambda message: None, batch=10)  # type: ignore[arg-type]
    f_times, o_times = [], []
    for r in range(5):
        f_times.append(_timed(floor.call, messages, r * messages) / messages)
        start = time.perf_counter()
        for i in range(messages):
            outbox.enqueue("bench", {"n": i})
        while dispatcher.run_once():
            pass
        o_times.append((time.perf_counter() - start) / messages)
    f, o = statistics.median(f_times) * 1e6, statistics.median(o_times) * 1e6
    print("Postgres, outbox: enqueue + claim (batches of 10) + settle, per message")
    print(f"  floor {f:8.1f} µs  ctrlrun {o:8.1f} µs  ({o / f:.2f}× the 2-commit floor)")


def _plan(floor: Floor, ctl: ctrlrun.Control, steps: int) -> None:
    """Plans of ``steps`` database steps (each a no-op on its own transaction), steps/s."""
    registry = Steps()

    @registry.db("bench.step")
    def step(ctx: object) -> dict[str, int]:
        return {"ok": 1}

    plans = Plans(ctl.store)  # type: ignore[arg-type]
    runner = PlanRunner(ctl.store, registry)  # type: ignore[arg-type]
    f_rates, o_rates = [], []
    for r in range(5):
        spent = _timed(lambda i: floor.reserve(f"{floor.tag}:step:{i}"), steps, r * steps)
        f_rates.append(steps / spent)
        plan = plans.propose(
            [{"action": "bench.step", "arguments": {"i": i}} for i in range(steps)], agent="bench"
        )
        plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bench")
        start = time.perf_counter()
        outcome = runner.run(plan.plan_id)
        o_rates.append(steps / (time.perf_counter() - start))
        assert outcome.ok, outcome
    f, o = statistics.median(f_rates), statistics.median(o_rates)
    print(f"Postgres, approved plan of {steps} database steps (claim + one txn per step)")
    print(f"  floor {f:8.0f} commits/s  ctrlrun {o:8.0f} steps/s  ({f / o:.2f}× per step)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, not a measurement")
    parser.add_argument("--only", choices=["one", "processes", "contended", "durable", "roles"])
    args = parser.parse_args()
    q = args.quick
    ok = True
    with pg_common.server() as url:
        if args.only in (None, "one"):
            ok &= one_client(url, ops=30 if q else 100, rounds=3 if q else 21)
        if args.only in (None, "processes"):
            ok &= processes(url, window=1.0 if q else 4.0, repeats=1 if q else 3)
        if args.only in (None, "contended"):
            contended(url, rounds=5 if q else 40)
        if args.only in (None, "durable"):
            durable(url, messages=50 if q else 300, steps=20 if q else 100)
        if args.only in (None, "roles"):
            ok &= pg_roles.agent_vs_owner(url, ops=30 if q else 100, rounds=3 if q else 21)
            pg_roles.definer_overhead(url, calls=2_000 if q else 20_000, rounds=3 if q else 9)
            pg_roles.hot_path_on_the_server(url, calls=200 if q else 2_000, rounds=3 if q else 9)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
