"""The multi-process Postgres workloads: OS processes behind a barrier, each on its own
connection (spawned, so no connection crosses a fork).

* distinct keys: every process calls as fast as it can for a fixed window; the total is calls/s.
* one key: every round, all processes call on the same fresh key at once; one wins, the rest
  are refused, and each reports how long it took from the barrier to its answer.
"""

from __future__ import annotations

import multiprocessing as mp
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


def _distinct(kind: str, url: str, schema: str, workdir: str, barrier: Any, window: float) -> int:
    """Calls completed by this process in ``window`` seconds after the barrier."""
    tag = f"{kind}-{mp.current_process().pid}"
    if kind in ("floor", "chain"):
        floor = pg_common.Floor(url, schema)
        call = floor.call if kind == "floor" else floor.call_chained
    else:
        act = _protected(url, schema, workdir)

        def call(i: int) -> None:
            act(f"{tag}:{i}")

    with ctrlrun.context(agent="bench"):
        for i in range(20):  # connect and warm up outside the window
            call(-1 - i)
        barrier.wait()
        done, deadline = 0, time.perf_counter() + window
        while time.perf_counter() < deadline:
            call(done)
            done += 1
    return done


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


def _run(target: Any, kind: str, url: str, schema: str, extra: Any) -> list[Any]:
    ctx = mp.get_context("spawn")
    with (
        tempfile.TemporaryDirectory() as workdir,
        ctx.Manager() as manager,
        ctx.Pool(PROCESSES) as pool,
    ):
        barrier = manager.Barrier(PROCESSES)
        jobs = [
            pool.apply_async(target, (kind, url, schema, workdir, barrier, extra))
            for _ in range(PROCESSES)
        ]
        return [job.get(timeout=600) for job in jobs]


def distinct_keys(url: str, kind: str, window: float) -> float:
    """Total calls/s of ``PROCESSES`` processes on distinct keys (one fresh schema)."""
    schema = pg_common.new_schema(url, f"b8_{kind}")
    try:
        if kind in ("floor", "chain"):  # create the tables once, not racing eight CREATEs
            pg_common.Floor(url, schema).close()
        else:
            pg_common.PostgresStateStore(url, schema=schema).close()
        counts = _run(_distinct, kind, url, schema, window)
    finally:
        pg_common.drop_schema(url, schema)
    return sum(counts) / window


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
