"""Timing helpers for the benchmarks: medians of repeated rounds, floor and ctrlrun side by side."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    name: str
    per_op_us: float  # median over rounds of (round time / ops)
    spread_us: float  # max - min of the round medians


def measure(
    name: str, op: Callable[[int], None], *, ops: int, rounds: int = 7, warmup: int = 200
) -> Measured:
    """Run ``op(i)`` ``ops`` times per round, ``rounds`` rounds; report the median per-op time.

    ``op`` gets a counter so every call can use a fresh key.
    """
    counter = 0
    for _ in range(warmup):
        op(counter)
        counter += 1
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(ops):
            op(counter)
            counter += 1
        samples.append((time.perf_counter() - start) / ops * 1e6)
    return Measured(name, statistics.median(samples), max(samples) - min(samples))


def report(title: str, floor: Measured, ours: Measured, target: float) -> bool:
    ratio = ours.per_op_us / floor.per_op_us
    ok = ratio <= target
    print(f"{title}")
    print(f"  floor   {floor.per_op_us:9.1f} µs/op  (±{floor.spread_us / 2:.1f})  {floor.name}")
    print(f"  ctrlrun {ours.per_op_us:9.1f} µs/op  (±{ours.spread_us / 2:.1f})  {ours.name}")
    print(f"  ratio   {ratio:9.2f}×   target ≤ {target:g}×   {'OK' if ok else 'MISSED'}")
    return ok
