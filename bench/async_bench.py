"""Async benchmark: protected calls in flight on one event loop vs the same work on sync threads.

Each call's executor waits ``LATENCY`` of simulated remote latency (``asyncio.sleep`` on the
async side, ``time.sleep`` on the sync side). Async: ``IN_FLIGHT`` tasks on one loop, each
calling an ``async def`` protected function in turn. Sync: ``THREADS`` threads calling the
plain protected function. Same store kind, same policy, same run, alternated. A ticker task
measures the event loop's lag (how late a 1 ms tick fires) while the async side runs: store
work that blocked the loop would show here.

``python async_bench.py [--calls N] [--stores sqlite-full,sqlite-normal,postgres]``; exits 1
if a target is missed (async calls/s >= sync 8-thread calls/s; loop lag p99 <= 10 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench_policy import POLICY

import ctrlrun
from ctrlrun.config import load_policy_text

LATENCY = 0.020
IN_FLIGHT = 64
THREADS = 8
TICK = 0.001
TARGET_LAG_P99_MS = 10.0


def sqlite_control(folder: Path, durability: str) -> ctrlrun.Control:
    store = ctrlrun.SQLiteStateStore(folder / "state.db", durability=durability)
    return ctrlrun.Control(load_policy_text(POLICY), store)


@contextlib.contextmanager
def postgres_control() -> Iterator[ctrlrun.Control]:
    import pg_common

    with pg_common.server() as url:
        schema = pg_common.new_schema(url, "bench_async")
        from ctrlrun.postgres import PostgresStateStore

        store = PostgresStateStore(url, schema=schema)
        try:
            yield ctrlrun.Control(load_policy_text(POLICY), store)
        finally:
            store.close()
            pg_common.drop_schema(url, schema)


def run_async(control: ctrlrun.Control, calls: int, start: int) -> tuple[float, list[float]]:
    """``calls`` protected calls, ``IN_FLIGHT`` at a time; calls/s and the loop's lags (s)."""

    @ctrlrun.protect("bench.effect", control=control)
    async def act(n: str) -> str:  # ``bench:{n}`` takes text (decision 0026)
        await asyncio.sleep(LATENCY)
        return n

    lags: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            due = loop.time() + TICK
            await asyncio.sleep(TICK)
            lags.append(max(0.0, loop.time() - due))

    async def worker(numbers: Iterator[int]) -> None:
        for n in numbers:
            await act(str(n))

    async def main() -> float:
        stop = asyncio.Event()
        tick = asyncio.create_task(ticker(stop))
        numbers = iter(range(start, start + calls))
        began = time.perf_counter()
        with ctrlrun.context("bench"):
            await asyncio.gather(*(worker(numbers) for _ in range(IN_FLIGHT)))
        elapsed = time.perf_counter() - began
        stop.set()
        await tick
        return elapsed

    elapsed = asyncio.run(main())
    return calls / elapsed, lags


def run_threads(control: ctrlrun.Control, calls: int, start: int) -> float:
    """``calls`` protected calls on ``THREADS`` threads; calls/s."""

    @ctrlrun.protect("bench.effect", control=control)
    def act(n: str) -> str:
        time.sleep(LATENCY)
        return n

    numbers = iter(range(start, start + calls))
    lock = threading.Lock()

    def worker() -> None:
        with ctrlrun.context("bench"):
            while True:
                with lock:
                    n = next(numbers, None)
                if n is None:
                    return
                act(str(n))

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return calls / (time.perf_counter() - began)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else 0.0


def measure(
    name: str,
    make: Callable[[], contextlib.AbstractContextManager[ctrlrun.Control]],
    calls: int,
    rounds: int,
) -> bool:
    async_rates, sync_rates, lags = [], [], []
    with make() as control:
        offset = 0
        for _ in range(rounds):  # alternated: neither side always runs on a warmer store
            rate, lag = run_async(control, calls, offset)
            async_rates.append(rate)
            lags.extend(lag)
            offset += calls
            sync_rates.append(run_threads(control, calls, offset))
            offset += calls
    a, s = statistics.median(async_rates), statistics.median(sync_rates)
    p50, p99 = percentile(lags, 0.50) * 1000, percentile(lags, 0.99) * 1000
    ok = a >= s and p99 <= TARGET_LAG_P99_MS
    print(
        f"{name:14} async {IN_FLIGHT} in flight {a:7.0f} calls/s | sync {THREADS} threads"
        f" {s:7.0f} calls/s | ratio {a / s:4.2f} | loop lag p50 {p50:5.2f} ms"
        f" p99 {p99:5.2f} ms | {'ok' if ok else 'MISSED'}"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=640)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="sqlite-full,sqlite-normal,postgres")
    args = parser.parse_args()
    print(
        f"async vs sync: {LATENCY * 1000:.0f} ms simulated latency per call,"
        f" {args.calls} calls x {args.rounds} rounds, alternated"
    )
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.stores.split(","):
            if name.startswith("sqlite-"):
                durability = name.removeprefix("sqlite-")
                folder = Path(tmp) / durability
                folder.mkdir()

                @contextlib.contextmanager
                def make(
                    folder: Path = folder, durability: str = durability
                ) -> Iterator[ctrlrun.Control]:
                    yield sqlite_control(folder, durability)

                ok &= measure(name, make, args.calls, args.rounds)
            else:
                ok &= measure(name, postgres_control, args.calls, args.rounds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
