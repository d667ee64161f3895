"""Shared pieces of the Postgres benchmarks: the server, the floor, the policy, timing.

The floor is what the guarantee physically needs, issued from this Python process over the
same kind of connection the store uses (psycopg 3, autocommit, the same URL, the server's
default ``synchronous_commit=on``): one single-row ``INSERT … ON CONFLICT DO NOTHING`` per
committed round trip, two per protected call ("reserve, then record").
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the test support code starts the throwaway server

from bench_policy import POLICY  # noqa: E402

import ctrlrun  # noqa: E402
from ctrlrun.config import load_policy_file  # noqa: E402
from ctrlrun.postgres import PostgresStateStore  # noqa: E402

ENV_URL = "CTRLRUN_BENCH_POSTGRES_URL"


@contextmanager
def server() -> Iterator[str]:
    """A superuser URL: ``$CTRLRUN_BENCH_POSTGRES_URL``, or a throwaway embedded cluster
    (started by the tests' support code, stopped on exit)."""
    url = os.environ.get(ENV_URL)
    if url:
        yield url
        return
    from support.pg import start_server

    pg = start_server()
    try:
        yield pg.url
    finally:
        pg.stop()


def new_schema(url: str, prefix: str) -> str:
    name = f"{prefix}_{os.urandom(5).hex()}"
    PostgresStateStore.create_schema(url, name)
    return name


def drop_schema(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def control(url: str, schema: str, policy_dir: Path) -> ctrlrun.Control:
    path = policy_dir / f"ctrlrun-{os.getpid()}.yaml"  # one per process: no torn reads
    path.write_text(POLICY)
    store = PostgresStateStore(url, schema=schema)
    return ctrlrun.Control(load_policy_file(path), store)


class Floor:
    """Two committed round trips per call, on a table pair of its own in ``schema``."""

    def __init__(self, url: str, schema: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=None)
        self.schema = schema
        ident = sql.Identifier(schema)
        for table in ("floor_r", "floor_o"):
            self.conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {}.{} (k text PRIMARY KEY, v text)").format(
                    ident, sql.Identifier(table)
                )
            )
        self.conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.floor_head (id int PRIMARY KEY, seq bigint);"
                " INSERT INTO {}.floor_head VALUES (1, 0) ON CONFLICT DO NOTHING"
            ).format(ident, ident)
        )
        self._chained = sql.SQL(
            "BEGIN; UPDATE {}.floor_head SET seq = seq + 1 WHERE id = 1;"
            " INSERT INTO {}.floor_o VALUES ({}, 'committed'); COMMIT"
        )
        self._r = sql.SQL(
            "INSERT INTO {}.floor_r VALUES (%s, 'reserved') ON CONFLICT DO NOTHING"
        ).format(ident)
        self._o = sql.SQL(
            "INSERT INTO {}.floor_o VALUES (%s, 'committed') ON CONFLICT DO NOTHING"
        ).format(ident)
        self.tag = os.urandom(4).hex()
        self._seq = itertools.count()

    def reserve(self, key: str) -> int:
        return self.conn.execute(self._r, (key,)).rowcount

    def record(self, key: str) -> None:
        self.conn.execute(self._o, (key,))

    def record_chained(self, key: str) -> None:
        """The record as one message that also advances a single head row: the serialization
        point every chained receipt needs, held from the update to the flushed COMMIT."""
        ident = sql.Identifier(self.schema)
        self.conn.execute(self._chained.format(ident, ident, sql.Literal(key)))

    def call_chained(self, i: int) -> None:
        """``call`` whose record advances the head row (see ``record_chained``)."""
        key = f"{self.tag}:{next(self._seq)}"
        self.reserve(key)
        self.record_chained(key)

    def call(self, i: int) -> None:
        """Reserve and record a key never used before (``i`` is ignored: a conflict would
        commit nothing and flatter the floor)."""
        key = f"{self.tag}:{next(self._seq)}"
        self.reserve(key)
        self.record(key)

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class Pair:
    """Floor and ctrlrun, measured interleaved in the same run: medians of per-round µs/op."""

    floor_us: float
    ours_us: float
    floor_rounds: tuple[float, ...]
    ours_rounds: tuple[float, ...]
    floor_cpu_us: float  # this process's CPU time per call (user + system), median of rounds
    ours_cpu_us: float

    @property
    def ratio(self) -> float:
        return self.ours_us / self.floor_us

    @property
    def round_ratio(self) -> float:
        """The median of the per-round ratios (each round's floor ran right before it)."""
        pairs = zip(self.floor_rounds, self.ours_rounds, strict=True)
        return statistics.median(o / f for f, o in pairs)


def interleaved(
    floor: Callable[[int], None],
    ours: Callable[[int], None],
    *,
    ops: int,
    rounds: int = 21,
    warmup: int = 100,
) -> Pair:
    """Alternate rounds of ``ops`` floor calls and ``ops`` ctrlrun calls, ``rounds`` times;
    the counter passed in is fresh for every call (a fresh key)."""
    counter = 0
    for _ in range(warmup):
        floor(counter)
        ours(counter)
        counter += 1
    f_rounds: list[float] = []
    o_rounds: list[float] = []
    f_cpu: list[float] = []
    o_cpu: list[float] = []
    for _ in range(rounds):
        for op, out, cpu in ((floor, f_rounds, f_cpu), (ours, o_rounds, o_cpu)):
            start, used = time.perf_counter(), time.process_time()
            for i in range(counter, counter + ops):
                op(i)
            out.append((time.perf_counter() - start) / ops * 1e6)
            cpu.append((time.process_time() - used) / ops * 1e6)
        counter += ops
    return Pair(
        statistics.median(f_rounds),
        statistics.median(o_rounds),
        tuple(f_rounds),
        tuple(o_rounds),
        statistics.median(f_cpu),
        statistics.median(o_cpu),
    )


def show(title: str, pair: Pair, *, target: float | None, floor_name: str) -> bool:
    """Print the pair; the verdict is on the median of per-round ratios (each ctrlrun round
    ran right after its floor round, so drift on a shared machine cancels best there)."""
    ok = target is None or pair.round_ratio <= target
    spread_f = max(pair.floor_rounds) - min(pair.floor_rounds)
    spread_o = max(pair.ours_rounds) - min(pair.ours_rounds)
    print(title)
    print(
        f"  floor   {pair.floor_us:9.1f} µs/op  (range {spread_f:.0f}; client CPU"
        f" {pair.floor_cpu_us:.0f} µs)  {floor_name}"
    )
    print(
        f"  ctrlrun {pair.ours_us:9.1f} µs/op  (range {spread_o:.0f}; client CPU"
        f" {pair.ours_cpu_us:.0f} µs)"
    )
    verdict = "" if target is None else f"   target ≤ {target:g}×   {'OK' if ok else 'MISSED'}"
    print(
        f"  ratio   {pair.round_ratio:9.2f}×  median of {len(pair.floor_rounds)} per-round"
        f" ratios (ratio of medians {pair.ratio:.2f}×)" + verdict
    )
    return ok


class RoundTrips:
    """Counts round trips on one psycopg connection through libpq's protocol trace: each
    ``ReadyForQuery`` the server sends ends one round trip (a simple query, or a Sync)."""

    def __init__(self, conn: Any, path: Path) -> None:
        self._conn = conn
        self._path = path
        self._file = path.open("w")
        conn.pgconn.trace(self._file.fileno())

    def stop(self) -> tuple[int, int]:
        """Stop tracing (libpq flushes its buffer) and return the round trips and the
        statements seen (one ``CommandComplete`` per statement the server ran)."""
        self._conn.pgconn.untrace()
        self._file.close()
        lines = self._path.read_text().splitlines()
        trips = sum(1 for line in lines if "\tB\t" in line and "\tReadyForQuery" in line)
        done = sum(1 for line in lines if "\tB\t" in line and "\tCommandComplete" in line)
        return trips, done
