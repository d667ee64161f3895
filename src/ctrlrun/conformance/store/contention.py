"""Contenders released together: threads behind a ``threading.Barrier``, OS processes behind
a file barrier (``ctrlrun._rendezvous``). Every wait is bounded.

The parent of a cross-process race checks what the race really was: every contender arrived
at the barrier, the pids are distinct and not the parent's, and every child imported the same
``ctrlrun`` as the parent (a child grading another checkout would prove nothing).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import ctrlrun
from ctrlrun._rendezvous import arrivals, run_workers

from .framework import CaseFailed, check

THREAD_TIMEOUT: Final = 60.0
BARRIER_TIMEOUT: Final = 30.0
WORKER_TIMEOUT: Final = 90.0
WORKER_MODULE: Final = "ctrlrun.conformance.store.worker"


def race_threads(calls: Sequence[Callable[[], object]]) -> list[object]:
    """Run each call on its own thread, all released by one barrier; each call's return value
    or the exception it raised, in order. Fails the case if a thread does not finish in time."""
    barrier = threading.Barrier(len(calls), timeout=BARRIER_TIMEOUT)
    results: list[object] = [None] * len(calls)

    def contend(index: int, call: Callable[[], object]) -> None:
        try:
            barrier.wait()
            results[index] = call()
        except Exception as exc:
            results[index] = exc

    threads = [
        threading.Thread(target=contend, args=(i, call), daemon=True)
        for i, call in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(THREAD_TIMEOUT)
        check(not thread.is_alive(), f"a contender did not return within {THREAD_TIMEOUT:.0f}s")
    return results


@dataclass(frozen=True, slots=True)
class ProcessRace:
    """What the workers reported (one dict each) and the remote's call markers."""

    outputs: list[dict[str, Any]]
    remote_calls: list[str]

    def with_outcome(self, prefix: str) -> list[dict[str, Any]]:
        """The outputs whose ``outcome`` starts with ``prefix``."""
        return [o for o in self.outputs if str(o.get("outcome", "")).startswith(prefix)]


def race_processes(url: str, payloads: Sequence[Mapping[str, Any]]) -> ProcessRace:
    """Run one worker per payload against the store at ``url``, behind a file barrier.

    Fails the case unless every worker exited cleanly with a report, all of them arrived at
    the barrier, the pids are distinct and not ours, and each imported our ``ctrlrun``.
    """
    with tempfile.TemporaryDirectory(prefix="ctrlrun-conformance-race-") as work:
        folder = Path(work)
        barrier, remote = folder / "barrier", folder / "remote"
        barrier.mkdir()
        remote.mkdir()
        common = {
            "url": url,
            "barrier": str(barrier),
            "parties": len(payloads),
            "barrier_timeout": BARRIER_TIMEOUT,
            "remote": str(remote),
        }
        try:
            results = run_workers(
                WORKER_MODULE,
                [{**common, **p} for p in payloads],
                folder,
                timeout=WORKER_TIMEOUT,
            )
        except TimeoutError as exc:
            raise CaseFailed(f"the worker processes did not finish: {exc}") from exc
        arrived = arrivals(barrier)
        outputs = [_output(result.output, result.returncode, result.stderr) for result in results]
        _check_race(outputs, arrived, len(payloads))
        return ProcessRace(outputs, sorted(os.listdir(remote)))


def _output(output: dict[str, Any] | None, code: int, stderr: str) -> dict[str, Any]:
    if output is None or code != 0:
        tail = stderr.strip().splitlines()[-1:] or ["no output"]
        raise CaseFailed(f"a worker exited {code} without a report: {tail[0]}")
    return output


def _check_race(outputs: list[dict[str, Any]], arrived: list[int], parties: int) -> None:
    check(
        len(arrived) == parties,
        f"only {len(arrived)} of {parties} processes arrived at the barrier: no real overlap",
    )
    pids = {o.get("pid") for o in outputs}
    check(
        len(pids) == parties and os.getpid() not in pids,
        f"expected {parties} distinct child pids, got {sorted(map(str, pids))}",
    )
    ours = ctrlrun.__file__
    others = {o.get("ctrlrun") for o in outputs} - {ours}
    check(not others, f"a worker imported another ctrlrun ({sorted(map(str, others))}), not {ours}")
