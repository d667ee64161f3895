"""Worker processes for the failover test, and the reading of what they leave behind.

Every worker walks the same keys ``pay:0``, ``pay:1``, … in order (so each key is raced by all
of them) through a protected call on the multi-host URL. Its executor appends ``key token``
to the worker's ledger before returning: the ledger, outside the database, is what really
ran. Each call's answer is appended to the worker's results (JSON lines), and each receipt
the worker was handed to its own ``JSONLSink`` file: what a caller holds. A write that failed
before its COMMIT (``WriteFailed``: the primary is gone, or not yet replaced) is retried on
the same key after a short pause; a worker stops when the stop file appears.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  pay.send:
    decision: allow
    effect: "pay:{n:int}"
"""

RETRY_PAUSE = 0.02


def answer_of(exc: BaseException) -> tuple[str, bool]:
    """A call's answer as the results record it, and whether the same key is tried again."""
    from ctrlrun.errors import (
        AmbiguousEffect,
        AmbiguousWrite,
        DuplicateEffect,
        OutcomeUnrecorded,
        StaleTimeline,
        StoreError,
        WriteFailed,
    )

    if isinstance(exc, DuplicateEffect):
        return f"duplicate:{exc.state}", False
    if isinstance(exc, AmbiguousEffect):
        return "ambiguous_effect", False
    if isinstance(exc, AmbiguousWrite):
        return f"ambiguous_write:{exc.reason}", False
    if isinstance(exc, OutcomeUnrecorded):
        return "unrecorded", False
    if isinstance(exc, StaleTimeline):
        return "stale_timeline", True
    if isinstance(exc, WriteFailed):
        return "write_failed", True
    if isinstance(exc, StoreError):  # a read that failed: nothing is known; safe to ask again
        return f"store_error:{type(exc).__name__}", True
    return f"error:{type(exc).__name__}:{exc}", False


def work(url: str, root: str, worker: int) -> None:
    """One worker (a child process): see the module docstring."""
    import ctrlrun
    from ctrlrun.config import load_policy_text
    from ctrlrun.store import open_store

    base = Path(root)
    stop = base / "stop"
    ledger = open(base / f"ledger-{worker}", "a", encoding="utf-8")  # noqa: SIM115
    results = open(base / f"results-{worker}", "a", encoding="utf-8")  # noqa: SIM115
    sink = ctrlrun.JSONLSink(base / f"held-{worker}.jsonl")
    control = ctrlrun.Control(load_policy_text(POLICY), open_store(url), sinks=[sink])

    @ctrlrun.protect("pay.send", control=control)
    def send(n: int) -> str:
        ledger.write(f"pay:{n} {ctrlrun.idempotency_token()}\n")
        ledger.flush()
        return "sent"

    n = 0
    with ctrlrun.context(agent=f"worker-{worker}"):
        while not stop.exists():
            try:
                send(n)
                answer, again = "ok", False
            except Exception as exc:
                answer, again = answer_of(exc)
            results.write(json.dumps({"key": f"pay:{n}", "answer": answer}) + "\n")
            results.flush()
            if again:
                time.sleep(RETRY_PAUSE)  # a back-off while no primary answers, not a race
            else:
                n += 1


@dataclass
class Outcome:
    """What the workers left in ``root``."""

    executed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    answers: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    held: list[Any] = field(default_factory=list)

    @classmethod
    def read(cls, root: Path) -> Outcome:
        found = cls()
        for path in sorted(root.glob("ledger-*")):
            for line in path.read_text().splitlines():
                key, token = line.split()
                found.executed[key].append(token)
        for path in sorted(root.glob("results-*")):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                found.answers[record["key"]].append(record["answer"])
        for path in sorted(root.glob("held-*.jsonl")):
            found.held += [json.loads(line) for line in path.read_text().splitlines()]
        return found

    def count(self, prefix: str) -> int:
        return sum(a.startswith(prefix) for answers in self.answers.values() for a in answers)


def count_answers(root: Path, prefix: str) -> int:
    total = 0
    for path in root.glob("results-*"):
        with open(path, encoding="utf-8") as results:
            total += sum(f'"answer": "{prefix}' in line for line in results)
    return total


def wait_for_answers(root: Path, prefix: str, at_least: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while count_answers(root, prefix) < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {at_least} {prefix!r} answers in {timeout} s")
        time.sleep(0.05)


def wait_for_every_worker(root: Path, workers: int, timeout: float = 90.0) -> None:
    """Until each of ``workers`` has answered once: a worker spawned late on a loaded machine
    must have opened its store before the primary is killed, or it would start mid-failover."""
    deadline = time.monotonic() + timeout
    while len(answered_since(root, "", {})) < workers:  # any answer: its store is open
        if time.monotonic() > deadline:
            raise AssertionError(f"not every one of {workers} workers answered in {timeout} s")
        time.sleep(0.05)


def answered_since(root: Path, prefix: str, offsets: dict[str, int]) -> set[str]:
    """The result files with a ``prefix`` answer after ``offsets`` (byte offsets per file)."""
    found = set()
    for path in root.glob("results-*"):
        with open(path, encoding="utf-8") as results:
            results.seek(offsets.get(path.name, 0))
            if any(f'"answer": "{prefix}' in line for line in results):
                found.add(path.name)
    return found


def offsets(root: Path) -> dict[str, int]:
    return {path.name: os.path.getsize(path) for path in root.glob("results-*")}
