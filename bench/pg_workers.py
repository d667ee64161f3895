"""The multi-process Postgres workloads: OS processes behind a barrier, each on its own
connection (spawned, so no connection crosses a fork).

* distinct keys: every process calls as fast as it can for a fixed window; the total is calls/s.
  Kind ``sharded``: ctrlrun with each process on a schema of its own, so on a chain of its own
  (the scaling route docs/postgres.md names: two schemas have two head rows and never contend).
* one key: every round, all processes call on the same fresh key at once; one wins, the rest
  are refused, and each reports how long it took from the barrier to its answer.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pg_common

import ctrlrun

PROCESSES = 8


def _protected(url: str, schema: str, workdir: str) -> Any:
    ctl = pg_common.control(url, schema, Path(workdir))

    @ctrlrun.protect("bench.effect", control=ctl)
    def act(n: str) -> str:
        return n

    return act


def _distinct(
    kind: str, url: str, schema: str, workdir: str, barrier: Any, window: float
) -> tuple[int, float | None]:
    """Calls completed by this process in ``window`` seconds after the barrier, and the
    machine's busy CPU seconds over that window (``busy_seconds``)."""
    tag = f"{kind}-{mp.current_process().pid}"
    if kind in ("floor", "chain"):
        floor = pg_common.Floor(url, schema)
        call = floor.call if kind == "floor" else floor.call_chained
    else:  # "ctrlrun", "one_chain" or "sharded": the schema given decides which
        act = _protected(url, schema, workdir)

        def call(i: int) -> None:
            act(f"{tag}:{i}")

    with ctrlrun.context(agent="bench"):
        for i in range(20):  # connect and warm up outside the window
            call(-1 - i)
        barrier.wait()
        busy = busy_seconds()
        done, deadline = 0, time.perf_counter() + window
        while time.perf_counter() < deadline:
            call(done)
            done += 1
        after = busy_seconds()
    return done, None if busy is None or after is None else after - busy


def _one_key(
    kind: str, url: str, schema: str, workdir: str, barrier: Any, rounds: int
) -> list[tuple[int, bool, float]]:
    """Per round: (round, won, seconds from the barrier to this process's answer)."""
    if kind == "floor":
        floor = pg_common.Floor(url, schema)
    else:
        act = _protected(url, schema, workdir)
    out = []
    with ctrlrun.context(agent="bench"):
        for r in range(rounds):
            key = f"{kind}-contended:{r}"
            barrier.wait()
            start = time.perf_counter()
            if kind == "floor":
                won = floor.reserve(key) == 1
                if won:
                    floor.record(key)
            else:
                try:
                    act(key)
                    won = True
                except (ctrlrun.DuplicateEffect, ctrlrun.AmbiguousEffect):
                    won = False
            out.append((r, won, time.perf_counter() - start))
    return out


def _run(target: Any, kind: str, url: str, schema: str | list[str], extra: Any) -> list[Any]:
    """``target`` in ``PROCESSES`` spawned processes behind one barrier; ``schema`` is one for
    all, or one per process."""
    schemas = schema if isinstance(schema, list) else [schema] * PROCESSES
    ctx = mp.get_context("spawn")
    with (
        tempfile.TemporaryDirectory() as workdir,
        ctx.Manager() as manager,
        ctx.Pool(PROCESSES) as pool,
    ):
        barrier = manager.Barrier(PROCESSES)
        jobs = [
            pool.apply_async(target, (kind, url, own, workdir, barrier, extra)) for own in schemas
        ]
        return [job.get(timeout=600) for job in jobs]


def busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy (every core, every process: this client,
    the others and the server), from Linux's ``/proc/stat``; None elsewhere."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Throughput:
    per_second: float  # calls/s of all processes together
    cpu_us: float | None  # the machine's busy CPU per call (client and server), µs


def distinct_keys(url: str, kind: str, window: float) -> Throughput:
    """Total calls/s of ``PROCESSES`` processes on distinct keys (one fresh schema; for
    ``sharded``, one fresh schema per process)."""
    count = PROCESSES if kind == "sharded" else 1
    schemas = [pg_common.new_schema(url, f"b8_{kind}") for _ in range(count)]
    try:
        for schema in schemas:  # create the tables once, not racing eight CREATEs
            if kind in ("floor", "chain"):
                pg_common.Floor(url, schema).close()
            else:  # "one_chain": every receipt on one head row, as before partitions
                chains = 1 if kind == "one_chain" else None
                pg_common.PostgresStateStore(url, schema=schema, partitions=chains).close()
        counts = _run(_distinct, kind, url, schemas if count > 1 else schemas[0], window)
    finally:
        for schema in schemas:
            pg_common.drop_schema(url, schema)
    calls = sum(done for done, _ in counts)
    busy = [b for _, b in counts if b is not None]
    cpu = statistics.median(busy) / calls * 1e6 if busy and calls else None
    return Throughput(calls / window, cpu)


@dataclass(frozen=True)
class Contended:
    rounds: int
    winners_ok: bool  # exactly one winner in every round
    winner_ms: float  # median over rounds: barrier → the winner's receipt
    last_loser_ms: float  # median over rounds: barrier → the slowest loser's refusal
    loser_ms: float  # median over every loser's refusal


def one_key(url: str, kind: str, rounds: int) -> Contended:
    schema = pg_common.new_schema(url, f"b1_{kind}")
    try:
        if kind == "floor":
            pg_common.Floor(url, schema).close()
        else:
            pg_common.PostgresStateStore(url, schema=schema).close()
        results = [row for part in _run(_one_key, kind, url, schema, rounds) for row in part]
    finally:
        pg_common.drop_schema(url, schema)
    winners, last_losers, losers, ok = [], [], [], True
    for r in range(rounds):
        rows = [row for row in results if row[0] == r]
        won = [t for _, w, t in rows if w]
        lost = [t for _, w, t in rows if not w]
        ok &= len(won) == 1 and len(lost) == PROCESSES - 1
        winners.extend(won)
        if lost:
            last_losers.append(max(lost))
            losers.extend(lost)
    return Contended(
        rounds,
        ok,
        statistics.median(winners) * 1e3,
        statistics.median(last_losers) * 1e3,
        statistics.median(losers) * 1e3,
    )
