"""Timing helpers for the benchmarks: the floor and ctrlrun interleaved in one run, medians.

Absolute times on a shared two-core machine drift by tens of percent within a minute, so a
floor measured before ctrlrun (or in another process) says little about ctrlrun's overhead.
``interleaved`` alternates the cases round by round (and flips which goes first every round),
so both see the same machine, and reports each case's median round.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

_next = 0


def take(count: int) -> int:
    """The first of ``count`` fresh operation numbers, unique across the whole run (the same
    floor file and store serve several workloads, and keys must never repeat)."""
    global _next  # one counter per benchmark process, by design
    first, _next = _next, _next + count
    return first


@dataclass
class Case:
    """One thing to time: ``op(i)`` once per operation (``i`` is unique across the run), and
    an optional untimed ``prepare(first, count)`` run before each round (e.g. grant approvals
    for the ``count`` operations starting at ``first``)."""

    name: str
    op: Callable[[int], None]
    prepare: Callable[[int, int], None] | None = None
    samples: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Measured:
    name: str
    per_op_us: float  # median over rounds of (round time / ops)
    spread_us: float  # max - min of the rounds
    cpu_us: float  # median over rounds of this process's CPU time per op

    @property
    def per_second(self) -> float:
        return 1e6 / self.per_op_us


def interleaved(
    cases: Sequence[Case], *, ops: int, rounds: int = 9, warmup: int = 100
) -> list[Measured]:
    """Time ``cases`` in alternating rounds of ``ops`` operations; medians per case.

    Every case first runs ``warmup`` untimed operations (caches, statement cache, file growth).
    Round ``r`` runs the cases in order, reversed on odd rounds, so neither side always runs on
    a machine the other just warmed (or just left busy).
    """
    for case in cases:
        first = take(warmup)
        if case.prepare is not None:
            case.prepare(first, warmup)
        for i in range(first, first + warmup):
            case.op(i)
    for round_index in range(rounds):
        order = cases if round_index % 2 == 0 else list(reversed(cases))
        for case in order:
            first = take(ops)
            if case.prepare is not None:
                case.prepare(first, ops)
            start, cpu = time.perf_counter(), time.process_time()
            for i in range(first, first + ops):
                case.op(i)
            case.samples.append((time.perf_counter() - start) / ops * 1e6)
            case.cpu.append((time.process_time() - cpu) / ops * 1e6)
    return [
        Measured(
            c.name,
            statistics.median(c.samples),
            max(c.samples) - min(c.samples),
            statistics.median(c.cpu),
        )
        for c in cases
    ]


def report(
    title: str,
    floor: Measured,
    ours: Measured,
    target: float | None,
    notes: Sequence[str] = (),
) -> bool:
    """Print floor, ctrlrun and their ratio (and the target, if there is one); True if met."""
    ratio = ours.per_op_us / floor.per_op_us
    ok = target is None or ratio <= target
    print(title)
    for label, m in (("floor", floor), ("ctrlrun", ours)):
        print(
            f"  {label:8s}{m.per_op_us:9.1f} µs/op  {m.per_second:8.0f}/s"
            f"  cpu {m.cpu_us:7.1f} µs  (spread {m.spread_us:.1f})  {m.name}"
        )
    verdict = "no target" if target is None else f"target ≤ {target:g}×   {_ok(ok)}"
    cpu = ours.cpu_us / floor.cpu_us
    print(f"  ratio   {ratio:9.2f}×   {verdict}   (cpu time ratio {cpu:.2f}×)")
    for note in notes:
        print(f"  {note}")
    return ok


def _ok(ok: bool) -> str:
    return "OK" if ok else "MISSED"
