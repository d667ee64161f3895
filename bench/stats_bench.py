"""``ctrlrun stats`` over a large history: how long the report takes on SQLite.

Writes N receipts (default 1,000,000) shaped like a protected call's into a fresh SQLite store
(bulk SQL: a million real calls would take minutes and prove nothing more about the reader;
the documents, columns and seq are what the store writes), then times, through the real CLI
code path (``refresh_stats`` + ``gather_stats`` + ``plan_report``):

* the first refresh, which folds every receipt into the rollup once (paid once per receipt);
* a report on an up-to-date rollup (the steady state), whole history and last 7 days;
* a report after 1,000 more receipts arrived (refresh folds only those).

``python stats_bench.py [--receipts N]``; exits 1 if a steady-state report takes over 1 s.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import ctrlrun
from ctrlrun._time import encode_instant, encode_receipt_instant
from ctrlrun.kernel.stats import Dimension, plan_report
from ctrlrun.store.stats import gather_stats, refresh_stats

ACTIONS = ("stripe.refund", "email.send", "crm.read", "k8s.namespace.delete", "iam.grant_admin")
RESULTS = ("committed",) * 8 + ("denied", "blocked", "failed", "ambiguous")
ERRORS = {
    "denied": "ActionDenied: denied (rule[2])",
    "blocked": "DuplicateEffect: effect is in progress",
    "failed": "NotExecuted: connection refused",
    "ambiguous": "TimeoutError: read timed out",
}
TARGET_S = 1.0


def _row(seq: int, at: datetime, rng: random.Random) -> tuple[object, ...]:
    result = rng.choice(RESULTS)
    finished = encode_receipt_instant(at)
    document = {
        "action": rng.choice(ACTIONS),
        "action_hash": "sha256:" + "a" * 64,
        "action_id": f"act_{seq:032x}",
        "approval_id": None,
        "approver": None,
        "arguments": {"amount": rng.randint(1, 10**6), "payment_id": f"pay_{seq}"},
        "attempt": 1,
        "decision": "deny" if result == "denied" else "allow",
        "decision_reason": f"rule[{rng.randint(0, 2)}]",
        "effect_key": f"refund:pay_{seq}",
        "environment": "production",
        "error": ERRORS.get(result),
        "finished_at": finished,
        "policy_hash": "sha256:" + "b" * 64,
        "prev_hash": "sha256:" + "c" * 64,
        "principal": {"agent": f"agent-{rng.randint(0, 19)}", "user": None},
        "receipt_id": f"rcp_{seq:032x}",
        "resource": None,
        "result": result,
        "schema": "ctrlrun.receipt/v1",
        "seq": seq,
        "started_at": finished,
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return (seq, document["receipt_id"], document["action_id"], document["effect_key"], result,
            text, "sha256:" + "d" * 64, encode_instant(at))  # fmt: skip


def fill(path: Path, first: int, count: int, start: datetime, step: timedelta) -> None:
    """Append ``count`` receipts from seq ``first``, ``step`` apart from ``start``."""
    rng = random.Random(first)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous=OFF")
    batch: list[tuple[object, ...]] = []
    for n in range(count):
        seq = first + n
        batch.append(_row(seq, start + step * n, rng))
        if len(batch) == 50_000 or n == count - 1:
            db.execute("BEGIN")
            db.executemany("INSERT INTO receipts VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch)
            db.execute("UPDATE receipt_chain SET seq = ?, hash = ? WHERE id = 1",
                       (seq, "sha256:" + "d" * 64))  # fmt: skip
            db.execute("COMMIT")
            batch.clear()
    db.close()


def report_once(store: ctrlrun.SQLiteStateStore, since: datetime | None) -> float:
    began = time.perf_counter()
    refresh_stats(store)
    window = gather_stats(store, since, Dimension.ACTION)
    plan_report(Dimension.ACTION, window.counts, window.approvals, window.resolved,
                open_now=window.open_now, now=datetime.now(UTC))  # fmt: skip
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--receipts", type=int, default=1_000_000)
    n = parser.parse_args().receipts
    now = datetime.now(UTC)
    start, step = now - timedelta(days=30), timedelta(days=30) / n
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "state.db"
        ctrlrun.SQLiteStateStore(path, durability="normal").close()
        began = time.perf_counter()
        fill(path, 1, n, start, step)
        print(f"wrote {n:,} receipts in {time.perf_counter() - began:.1f} s"
              f" ({path.stat().st_size / 1e6:,.0f} MB)")  # fmt: skip
        store = ctrlrun.SQLiteStateStore(path, durability="normal")
        try:
            began = time.perf_counter()
            folded = refresh_stats(store)
            print(
                f"first refresh: folded {folded:,} receipts in {time.perf_counter() - began:.1f} s"
            )
            steady = report_once(store, None)
            week = report_once(store, now - timedelta(days=7))
            fill(path, n + 1, 1000, now, timedelta(milliseconds=1))
            tail = report_once(store, None)
        finally:
            store.close()
    for name, took in (("whole history", steady), ("last 7 days", week), ("+1,000 new", tail)):
        print(f"stats report, {name}: {took * 1000:.0f} ms (target <= {TARGET_S * 1000:.0f} ms)")
    return 0 if max(steady, week, tail) <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
