"""The Postgres scale curve on whatever machine runs it: calls/s of 1, 2, 4, … processes on
distinct keys, one schema, for the floor (two single-row inserts per call), the floor with one
head row advanced per call (``chain``: the serialization point a chained receipt needs),
ctrlrun on a store with one receipt chain (``one_chain``: every call locks one head row, as
before partitions) and ctrlrun as created by default (64 chains); each as a ratio to the
floor at the same count, in the same run.

Run with ``make bench`` or ``python scale_curve.py [--counts 1,2,4] [--window S]`` from this
directory (default counts: powers of two up to twice the cores; default window 2 s per point).
The server is ``$CTRLRUN_BENCH_POSTGRES_URL`` or a throwaway embedded cluster on this machine,
so the server's CPU is part of the machine's. CPU per call is the whole machine's busy CPU
(``/proc/stat``: clients and server together) over the window, divided by the calls; "-" where
the platform has no ``/proc/stat``. Processes are spawned and start behind one barrier
(pg_workers).
"""

from __future__ import annotations

import argparse
import os
import sys

import pg_common
import pg_workers

KINDS = ("floor", "chain", "one_chain", "ctrlrun")


def default_counts(cores: int | None = None) -> list[int]:
    """1, 2, 4, … up to twice the cores (the last is exactly twice the cores)."""
    top = 2 * (cores or os.cpu_count() or 1)
    counts, n = [], 1
    while n < top:
        counts.append(n)
        n *= 2
    return [*counts, top]


def curve(
    url: str, counts: list[int], window: float
) -> dict[int, dict[str, pg_workers.Throughput]]:
    """Every kind at every count, counts in order; kinds interleaved at each count."""
    out: dict[int, dict[str, pg_workers.Throughput]] = {}
    for count in counts:
        pg_workers.PROCESSES = count
        out[count] = {kind: pg_workers.distinct_keys(url, kind, window) for kind in KINDS}
    return out


def _cpu(t: pg_workers.Throughput) -> str:
    return "-" if t.cpu_us is None else f"{t.cpu_us:,.0f}"


def show(points: dict[int, dict[str, pg_workers.Throughput]], window: float) -> None:
    print(
        f"Postgres scale curve, distinct keys, one schema, {os.cpu_count()} cores,"
        f" {window:g} s per point (CPU: whole machine, µs/call)"
    )
    print(
        f"  {'procs':>5} {'floor/s':>9} {'chain/s':>9} {'1 chain/s':>9} {'ctrlrun/s':>9}"
        f" {'chain×':>7} {'1 chain×':>8} {'ctrlrun×':>8} {'floor CPU':>9} {'ctrlrun CPU':>11}"
    )
    for count, row in points.items():
        f, c, one, o = (row[k] for k in KINDS)
        print(
            f"  {count:>5} {f.per_second:>9,.0f} {c.per_second:>9,.0f}"
            f" {one.per_second:>9,.0f} {o.per_second:>9,.0f}"
            f" {c.per_second / f.per_second:>7.2f} {one.per_second / f.per_second:>8.2f}"
            f" {o.per_second / f.per_second:>8.2f} {_cpu(f):>9} {_cpu(o):>11}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", help="comma-separated process counts")
    parser.add_argument("--window", type=float, default=2.0, help="seconds per point")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")] if args.counts else default_counts()
    with pg_common.server() as url:
        show(curve(url, counts, args.window), args.window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
