"""Client CPU of one protected call on the Postgres store, against the raw-SQL floor.

One process, one client: rounds of ``--calls`` protected calls (an effect key, the happy
path: two write transactions) alternate with rounds of the floor's two single-row inserts
(``pg_common.Floor``); each round's CPU time (``time.process_time``, steadier than wall time
on a shared machine) per call is kept, and the report gives the median and range of each and
of their difference, which is what the store and the runtime cost on the client.
``--profile N`` instead profiles N calls with cProfile and prints the top functions.

``python pg_call_cpu.py [--calls N] [--rounds R] [--profile N]``
(server: ``$CTRLRUN_BENCH_POSTGRES_URL`` or a throwaway embedded cluster)
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pg_common
from pg_common import Floor

import ctrlrun


def _cpu_per_call(op: Callable[[int], None], start: int, calls: int) -> float:
    used = time.process_time()
    for i in range(start, start + calls):
        op(i)
    return (time.process_time() - used) / calls * 1e6


def measure(floor: Floor, act: Callable[[int], object], calls: int, rounds: int) -> None:
    counter = 0
    for i in range(200):  # warm-up: connections, caches, the first JIT-free paths
        floor.call(i)
        act(i)
    counter = 200
    f_us: list[float] = []
    o_us: list[float] = []
    for _ in range(rounds):
        f_us.append(_cpu_per_call(floor.call, counter, calls))
        o_us.append(_cpu_per_call(act, counter, calls))  # type: ignore[arg-type]
        counter += calls
    over = [o - f for f, o in zip(f_us, o_us, strict=True)]
    for name, xs in (("floor", f_us), ("ctrlrun", o_us), ("over floor", over)):
        print(
            f"  {name:10s} client CPU {statistics.median(xs):6.0f} µs/call"
            f"  (range {min(xs):.0f}-{max(xs):.0f}, {rounds} rounds of {calls})"
        )


def profile(act: Callable[[int], object], calls: int) -> None:
    for i in range(200):
        act(-1 - i)
    prof = cProfile.Profile(time.process_time)  # CPU, not waiting
    prof.enable()
    for i in range(calls):
        act(10**6 + i)
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--profile", type=int, default=0, help="profile N calls instead")
    args = parser.parse_args()
    with pg_common.server() as url, tempfile.TemporaryDirectory() as workdir:
        schema = pg_common.new_schema(url, "b_cpu")
        try:
            ctl = pg_common.control(url, schema, Path(workdir))
            floor = Floor(url, schema)

            @ctrlrun.protect("bench.effect", control=ctl)
            def act(n: str) -> str:
                return n

            def call(i: int) -> object:
                return act(f"{floor.tag}-{i}")

            with ctrlrun.context(agent="bench"):
                if args.profile:
                    profile(call, args.profile)
                else:
                    print("Postgres, protected call with an effect key, one client")
                    measure(floor, call, args.calls, args.rounds)
            floor.close()
            ctl.store.close()  # type: ignore[attr-defined]
        finally:
            pg_common.drop_schema(url, schema)


if __name__ == "__main__":
    main()
