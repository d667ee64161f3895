"""SQLite benchmarks: a protected call against the raw SQL its guarantee needs, same run.

The floor is two ``BEGIN IMMEDIATE`` write transactions with one single-row insert each, from
this Python process, with the same WAL and ``synchronous`` setting as the store: the physical
cost of "reserve, then record" with nothing else.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path

from timing import Measured, measure, report

import ctrlrun

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  bench.effect:
    decision: allow
    effect: "bench:{n}"
  bench.read:
    decision: allow
  bench.approved:
    decision: approve
    effect: "approved:{n}"
"""


def floor(path: Path, synchronous: str, ops: int) -> Measured:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE r (k TEXT PRIMARY KEY, v TEXT)")
    conn.execute("CREATE TABLE o (k TEXT PRIMARY KEY, v TEXT)")

    def op(i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO r VALUES (?, 'reserved')", (f"k{i}",))
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO o VALUES (?, 'committed')", (f"k{i}",))
        conn.execute("COMMIT")

    return measure(f"2 × BEGIN IMMEDIATE/INSERT/COMMIT, synchronous={synchronous}", op, ops=ops)


def control(workdir: Path, durability: str) -> ctrlrun.Control:
    (workdir / "ctrlrun.yaml").write_text(POLICY)
    store = ctrlrun.SQLiteStateStore(workdir / "state.db", durability=durability)
    return ctrlrun.Control(ctrlrun.Policy.from_file(workdir / "ctrlrun.yaml"), store)


def protected(workdir: Path, durability: str, ops: int, *, effect: bool) -> Measured:
    ctl = control(workdir, durability)
    name = "bench.effect" if effect else "bench.read"

    @ctrlrun.protect(name, control=ctl)
    def act(n: int) -> int:
        return n

    def op(i: int) -> None:
        act(i)

    with ctrlrun.context(agent="bench"):
        label = "with an effect key" if effect else "without an effect"
        return measure(f"@protect call {label}, durability={durability}", op, ops=ops)


def approved(workdir: Path, durability: str, ops: int) -> Measured:
    ctl = control(workdir, durability)

    @ctrlrun.protect("bench.approved", control=ctl)
    def act(n: int) -> int:
        return n

    def op(i: int) -> None:
        try:
            act(i)
        except ctrlrun.ApprovalRequired as asked:
            request = asked.request_id
        ctl.store.grant_approval(request, "bench")
        with ctrlrun.with_approval(request):
            act(i)

    with ctrlrun.context(agent="bench"):
        return measure(
            f"request + grant + approved call, durability={durability}", op, ops=ops // 2
        )


def main() -> int:
    ok = True
    for durability, synchronous, ops in (("full", "FULL", 300), ("normal", "NORMAL", 2000)):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            base = floor(Path(a) / "floor.db", synchronous, ops)
            ours = protected(Path(b), durability, ops, effect=True)
            ok &= report(f"SQLite, protected call with an effect key ({durability})", base, ours, 3)
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            base = floor(Path(a) / "floor.db", synchronous, ops)
            ours = protected(Path(b), durability, ops, effect=False)
            report(f"SQLite, protected call without an effect ({durability})", base, ours, 3)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        base = floor(Path(a) / "floor.db", "FULL", 200)
        ours = approved(Path(b), "full", 200)
        print("SQLite, approval round trip (4 transactions by design: request, grant, use ×2)")
        print(
            f"  floor {base.per_op_us:.1f} µs  ctrlrun {ours.per_op_us:.1f} µs  "
            f"({ours.per_op_us / base.per_op_us:.2f}× the 2-commit floor)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
