"""The path of one protected call through the runtime: which modules it enters, how often, how
many Python functions it calls, and its time per call.

A call is profiled with ``sys.setprofile`` (and ``threading.setprofile`` for the store threads
of the async path): every ``call`` event of a Python function counts once for the file its
code is in (a generator or coroutine counts again each time it resumes). The calls are
counted after a warm-up, on a real SQLite store file, with distinct effect keys (the happy
path: two write transactions). Time per call is the median round of many calls, with no
profiler installed: wall clock, and this process's CPU time (which other load on a shared
machine disturbs less); and the runtime's CPU alone, with a store that answers at once.

``python call_path.py [--calls N] [--rounds R] [--json] [--functions]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from bench_policy import POLICY

import ctrlrun
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.effect import Reservation
from ctrlrun.store.protocol import FinishRequest, Started, StartRequest

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

PROFILED = 20  # calls counted per path, after the warm-up; the report is per call
WARMUP = 50


def module_of(filename: str) -> str:
    """``runtime/control.py`` for a ctrlrun file, ``(other)`` for the rest."""
    marker = "/ctrlrun/"
    at = filename.rfind(marker)
    return filename[at + len(marker) :] if at >= 0 else "(other)"


class Entries:
    """Python function entries per file, while ``active``; safe to install on many threads
    (only one of them runs at a time on the measured paths: the others wait for it)."""

    def __init__(self) -> None:
        self.by_file: Counter[str] = Counter()
        self.by_function: Counter[tuple[str, str]] = Counter()
        self.active = False
        self._lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and self.active:
            code = frame.f_code
            with self._lock:
                self.by_file[code.co_filename] += 1
                self.by_function[code.co_filename, code.co_qualname] += 1

    def per_module(self, calls: int) -> dict[str, float]:
        merged: Counter[str] = Counter()
        for filename, count in self.by_file.items():
            merged[module_of(filename)] += count
        return {name: merged[name] / calls for name in sorted(merged)}

    def runtime_functions(self, calls: int) -> dict[str, float]:
        """Entries per call of each function in ``runtime/``, by ``module:qualname``."""
        return {
            f"{module_of(filename)}:{name}": count / calls
            for (filename, name), count in sorted(self.by_function.items())
            if module_of(filename).startswith("runtime/")
        }


@contextmanager
def counting(entries: Entries) -> Iterator[None]:
    """Count this thread's function entries (and those of threads already given ``entries``)."""
    sys.setprofile(entries)
    entries.active = True
    try:
        yield
    finally:
        entries.active = False
        sys.setprofile(None)


def control(workdir: Path, async_workers: int = 8) -> ctrlrun.Control:
    store = ctrlrun.SQLiteStateStore(workdir / "state.db", durability="normal")
    return ctrlrun.Control(load_policy_text(POLICY), store, async_workers=async_workers)


def sync_call(ctl: ctrlrun.Control) -> Callable[[int], None]:
    @ctrlrun.protect("bench.effect", control=ctl)
    def act(n: str) -> str:  # ``bench:{n}`` takes text (decision 0026)
        return n

    def op(i: int) -> None:
        act(f"s{i}")

    return op


def async_calls(ctl: ctrlrun.Control) -> Callable[[range], None]:
    """Runs one event loop over the numbers given, awaiting one protected call each."""

    @ctrlrun.protect("bench.effect", control=ctl)
    async def act(n: str) -> str:
        return n

    def ops(numbers: range) -> None:
        async def main() -> None:
            with ctrlrun.context(agent="bench"):
                for i in numbers:
                    await act(f"a{i}")

        asyncio.run(main())

    return ops


def path_sync(workdir: Path) -> Entries:
    ctl = control(workdir)
    op = sync_call(ctl)
    entries = Entries()
    with ctrlrun.context(agent="bench"):
        for i in range(WARMUP):
            op(i)
        with counting(entries):
            for i in range(WARMUP, WARMUP + PROFILED):
                op(i)
    ctl.store.close()  # type: ignore[attr-defined]
    return entries


def path_async(workdir: Path) -> Entries:
    entries = Entries()
    threading.setprofile(entries)  # the store threads, started by the first call below
    try:
        ctl = control(workdir, async_workers=1)
        ops = async_calls(ctl)
        ops(range(WARMUP))
        # one loop for every counted call: its start and end are counted once, spread thin
        with counting(entries):
            ops(range(WARMUP, WARMUP + PROFILED))
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    ctl.store.close()  # type: ignore[attr-defined]
    return entries


def time_per_call(workdir: Path, calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median µs per call over ``rounds`` rounds of ``calls`` calls, wall clock and this
    process's CPU (every thread's: the async path's store threads too), sync and async."""
    ctl = control(workdir)
    op, ops = sync_call(ctl), async_calls(ctl)
    samples: dict[str, dict[str, list[float]]] = {
        name: {"us": [], "cpu_us": []} for name in ("sync", "async")
    }
    base = 10_000
    with ctrlrun.context(agent="bench"):
        for i in range(WARMUP):
            op(base + i)
    ops(range(base + WARMUP, base + 2 * WARMUP))

    def sync_round(first: int) -> None:
        with ctrlrun.context(agent="bench"):
            for i in range(first, first + calls):
                op(i)

    def async_round(first: int) -> None:
        ops(range(first, first + calls))

    for r in range(rounds):
        first = base * (r + 2)
        for name, body in (("sync", sync_round), ("async", async_round)):
            began, cpu = time.perf_counter(), time.process_time()
            body(first)
            samples[name]["cpu_us"].append((time.process_time() - cpu) / calls * 1e6)
            samples[name]["us"].append((time.perf_counter() - began) / calls * 1e6)
    ctl.store.close()  # type: ignore[attr-defined]
    return {
        name: {kind: statistics.median(values) for kind, values in found.items()}
        for name, found in samples.items()
    }


class AnsweringStore:
    """A store that answers at once and keeps nothing: the first transaction grants attempt 1,
    the second returns its receipt draft. Only for timing the runtime's own Python (the
    pipeline alone, as ``sqlite_bench``'s "sql only" times the store's statements alone)."""

    def start_action(self, request: StartRequest) -> Started:
        key = request.effect_key or ""
        return Started(Reservation(key, request.action_id, 1, EPOCH), None)

    def finish_action(self, request: FinishRequest) -> Any:
        return request.receipt


def pipeline_alone(calls: int, rounds: int) -> float:
    """Median CPU µs per sync call over ``rounds`` rounds with ``AnsweringStore``."""
    ctl = ctrlrun.Control(load_policy_text(POLICY), AnsweringStore())  # type: ignore[arg-type]
    op = sync_call(ctl)
    found = []
    with ctrlrun.context(agent="bench"):
        for i in range(WARMUP):
            op(i)
        for r in range(rounds):
            first = 10_000 * (r + 1)
            cpu = time.process_time()
            for i in range(first, first + calls):
                op(i)
            found.append((time.process_time() - cpu) / calls * 1e6)
    return statistics.median(found)


def measure(calls: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in ("sync", "async", "timed"):
            (root / name).mkdir()
        paths = {"sync": path_sync(root / "sync"), "async": path_async(root / "async")}
        times = time_per_call(root / "timed", calls, rounds)
    found: dict[str, Any] = {}
    for name, entries in paths.items():
        modules = entries.per_module(PROFILED)
        found[name] = {
            "modules": modules,
            "functions": entries.runtime_functions(PROFILED),
            "calls": sum(modules.values()),
            **times[name],
        }
    found["sync"]["pipeline_alone_cpu_us"] = pipeline_alone(calls * 4, rounds)
    return found


def show(name: str, found: dict[str, Any], functions: bool) -> None:
    modules = found["modules"]
    print(
        f"{name}: {found['calls']:.0f} Python calls per call, {found['us']:.1f} µs per call"
        f" ({found['cpu_us']:.1f} µs CPU)"
    )
    runtime = {m: n for m, n in modules.items() if m.startswith("runtime/")}
    for module, count in sorted(runtime.items(), key=lambda item: -item[1]):
        print(f"  {module:28} {count:6.1f} entries per call")
    rest = {
        "ctrlrun, outside runtime/": sum(
            n for m, n in modules.items() if not m.startswith("runtime/") and m != "(other)"
        ),
        "outside ctrlrun": modules.get("(other)", 0.0),
    }
    for label, count in rest.items():
        print(f"  {label:28} {count:6.1f} entries per call")
    if functions:
        for function, count in found["functions"].items():
            print(f"    {function:50} {count:5.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--functions", action="store_true", help="list runtime/ functions")
    args = parser.parse_args()
    found = measure(args.calls, args.rounds)
    if args.json:
        print(json.dumps(found, indent=2, sort_keys=True))
        return
    print(f"Python {sys.version.split()[0]}; SQLite store (durability=normal), distinct keys")
    show("sync protected call", found["sync"], args.functions)
    alone = found["sync"]["pipeline_alone_cpu_us"]
    print(f"  the runtime alone (a store that answers at once): {alone:.1f} µs CPU per call")
    show("async protected call", found["async"], args.functions)


if __name__ == "__main__":
    main()
