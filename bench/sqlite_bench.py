"""SQLite benchmarks: each ctrlrun workload against the raw SQL its guarantee needs, same run.

Every floor is issued from this Python process through ``sqlite3`` with the store's own
settings (WAL, the same ``synchronous``, ``BEGIN IMMEDIATE`` for every write). The floor of a
protected call is two write transactions with one single-row insert each: "reserve, then
record" with nothing else. Floor and ctrlrun run in alternating rounds (``timing.interleaved``);
after the timing, one untimed pass per side counts SQL statements and WAL frames (pages
written) per operation, which is what a commit costs when it does not wait for the disk.

``python sqlite_bench.py [--quick] [--durability full|normal] [--repeat N]``; exits 1 if a
target is missed.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from bench_policy import POLICY
from timing import Case, interleaved, report, take

import ctrlrun
from ctrlrun.config import load_policy_file
from ctrlrun.durable import Dispatcher, Outbox, PlanRunner, Plans, Steps
from ctrlrun.store.queries import load_queries

SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}
BATCH = 10  # the Dispatcher's default batch
PLAN_STEPS = 10


# --- the floor ------------------------------------------------------------------------------


class Floor:
    """Raw SQL on a file with the store's settings: one connection, WAL, ``BEGIN IMMEDIATE``."""

    def __init__(self, path: Path, durability: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS[durability]}")
        for table in ("r", "o", "a", "m", "p", "s"):
            self.conn.execute(f"CREATE TABLE {table} (k TEXT PRIMARY KEY, v TEXT)")

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        yield self.conn
        self.conn.execute("COMMIT")

    def two_commits(self, i: int) -> None:
        """Reserve, then record: one insert per transaction."""
        with self.write() as c:
            c.execute("INSERT INTO r VALUES (?, 'reserved')", (f"k{i}",))
        with self.write() as c:
            c.execute("INSERT INTO o VALUES (?, 'committed')", (f"k{i}",))

    def grant(self, first: int, count: int) -> None:
        with self.write() as c:
            c.executemany(
                "INSERT INTO a VALUES (?, 'granted')",
                [(f"a{i}",) for i in range(first, first + count)],
            )

    def consume_and_reserve(self, i: int) -> None:
        """An approved call: consume the approval and reserve in one transaction, then record."""
        with self.write() as c:
            if (
                c.execute(
                    "UPDATE a SET v = 'consumed' WHERE k = ? AND v = 'granted'", (f"a{i}",)
                ).rowcount
                != 1
            ):
                raise AssertionError("floor: approval not granted")
            c.execute("INSERT INTO r VALUES (?, 'reserved')", (f"k{i}",))
        with self.write() as c:
            c.execute("INSERT INTO o VALUES (?, 'committed')", (f"k{i}",))

    def outbox(self, i: int) -> None:
        """Enqueue one message; every ``BATCH``th, claim the batch and settle each message."""
        with self.write() as c:
            c.execute("INSERT INTO m VALUES (?, 'pending')", (f"m{i}",))
        if (i + 1) % BATCH:
            return
        with self.write() as c:
            claimed = c.execute(
                "UPDATE m SET v = 'processing' WHERE k IN"
                " (SELECT k FROM m WHERE v = 'pending' LIMIT ?) RETURNING k",
                (BATCH,),
            ).fetchall()
        for (key,) in claimed:
            with self.write() as c:
                c.execute("UPDATE m SET v = 'sent' WHERE k = ? AND v = 'processing'", (key,))

    def plan_step(self, i: int) -> None:
        """One plan step: a fenced heartbeat update and the step row, in one transaction; the
        plan's claim and finish (one write each) amortized over its ``PLAN_STEPS`` steps."""
        plan = f"p{i // PLAN_STEPS}"
        if i % PLAN_STEPS == 0:
            with self.write() as c:
                c.execute("INSERT INTO p VALUES (?, 'executing')", (plan,))
        with self.write() as c:
            if (
                c.execute(
                    "UPDATE p SET v = 'executing' WHERE k = ? AND v = 'executing'", (plan,)
                ).rowcount
                != 1
            ):
                raise AssertionError("floor: plan not executing")
            c.execute("INSERT INTO s VALUES (?, 'ok')", (f"s{i}",))
        if i % PLAN_STEPS == PLAN_STEPS - 1:
            with self.write() as c:
                c.execute("UPDATE p SET v = 'executed' WHERE k = ?", (plan,))


# --- ctrlrun --------------------------------------------------------------------------------


def open_control(workdir: Path, durability: str) -> ctrlrun.Control:
    """A ``Control`` as a user builds one: the policy file, a store file, default settings
    (no sinks: ``Control`` ships none by default)."""
    (workdir / "ctrlrun.yaml").write_text(POLICY)
    store = ctrlrun.SQLiteStateStore(workdir / "state.db", durability=durability)
    return ctrlrun.Control(load_policy_file(workdir / "ctrlrun.yaml"), store)


def protected_op(ctl: ctrlrun.Control, *, effect: bool) -> Callable[[int], None]:
    # the key template is a plain ``{n}``, which takes text (decision 0026): pass ``str(i)``
    @ctrlrun.protect("bench.effect" if effect else "bench.read", control=ctl)
    def act(n: str) -> str:
        return n

    def op(i: int) -> None:
        act(str(i))

    return op


class Approved:
    """Approval-consuming calls: each round's approvals are requested and granted untimed."""

    def __init__(self, ctl: ctrlrun.Control) -> None:
        self.ctl = ctl
        self.requests: dict[int, str] = {}

        @ctrlrun.protect("bench.approved", control=ctl)
        def act(n: str) -> str:  # ``approved:{n}`` takes text (decision 0026)
            return n

        self.act = act

    def prepare(self, first: int, count: int) -> None:
        for i in range(first, first + count):
            try:
                self.act(str(i))
            except ctrlrun.ApprovalRequired as asked:
                self.ctl.store.grant_approval(asked.request_id, "bench")
                self.requests[i] = asked.request_id

    def op(self, i: int) -> None:
        with ctrlrun.with_approval(self.requests.pop(i)):
            self.act(str(i))


def outbox_op(store: ctrlrun.SQLiteStateStore) -> Callable[[int], None]:
    outbox = Outbox(store)
    dispatcher = Dispatcher(store, lambda message: None, batch=BATCH)

    def op(i: int) -> None:
        outbox.enqueue("bench.topic", {"n": i})
        if (i + 1) % BATCH == 0 and len(dispatcher.run_once()) != BATCH:
            raise AssertionError("outbox: a batch came back short")

    return op


class PlanSteps:
    """Database plan steps: plans of ``PLAN_STEPS`` no-op steps, proposed and approved untimed;
    the timed part is ``PlanRunner.run`` (claim, every step, finish) spread over its steps."""

    def __init__(self, store: ctrlrun.SQLiteStateStore) -> None:
        steps = Steps()
        steps.db("bench.step")(lambda ctx: None)
        self.plans = Plans(store)
        self.runner = PlanRunner(store, steps)
        self.pending: dict[int, str] = {}

    def prepare(self, first: int, count: int) -> None:
        for i in range(first, first + count, PLAN_STEPS):
            plan = self.plans.propose(
                [{"action": "bench.step", "arguments": {"n": n}} for n in range(PLAN_STEPS)],
                agent="bench",
                ttl=timedelta(hours=1),
            )
            self.plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bench")
            self.pending[i] = plan.plan_id

    def op(self, i: int) -> None:
        if i % PLAN_STEPS == 0 and not self.runner.run(self.pending.pop(i)).ok:
            raise AssertionError("plan: not executed")


class Replay:
    """ctrlrun's own statements for a protected call with an effect key — the same named
    queries, in the same two transactions, with rows as large as a real call's (copied from
    one) — and no Python pipeline around them: the SQL's share of a call."""

    def __init__(self, workdir: Path, durability: str) -> None:
        ctl = open_control(workdir, durability)
        with ctrlrun.context(agent="bench"):
            protected_op(ctl, effect=True)(0)
        self.conn = store_conn(ctl.store)
        self.q = load_queries("sqlite")
        events = [row[0] for row in self.conn.execute("SELECT data_json FROM events")]
        self.first, self.second = events[:4], events[4]
        self.document = self.conn.execute("SELECT document FROM receipts").fetchone()[0]
        one_row = "(?, ?, ?, ?, ?, ?)"
        head = self.q["event_insert"][: self.q["event_insert"].index("VALUES")]
        self.events_sql = head + "VALUES " + ", ".join([one_row] * len(self.first))

    def op(self, i: int) -> None:
        c, q, key, aid = self.conn, self.q, f"replay:{i}", f"act_{i:032x}"
        ts = "2026-01-01T00:00:00.000000Z"
        event = {"ts": ts, "type": "X", "action_id": aid, "effect_key": key, "approval_id": None}
        c.execute("BEGIN IMMEDIATE")
        effect = {"effect_key": key, "state": "executing", "action_id": aid, "attempt": 1}
        c.execute(
            q["effect_insert"],
            {**effect, "created_at": ts, "updated_at": ts, "lease_expires_at": ts},
        )
        # one multi-row INSERT for the transaction's events, as the store writes them
        rows = [(ts, "X", aid, key, None, d) for d in self.first]
        c.execute(self.events_sql, [value for row in rows for value in row])
        c.execute("COMMIT")
        c.execute("BEGIN IMMEDIATE")
        moved = {**effect, "state": "committed", "from_state": "executing", "updated_at": ts}
        extra = {"lease_expires_at": None, "result_json": "1", "error": None, "resolved_by": None}
        extra["committed_receipt_id"] = f"rcp_{i}"
        if c.execute(q["effect_move"], {**moved, **extra}).rowcount != 1:
            raise AssertionError("replay: the outcome update matched no row")
        c.execute(q["event_insert"], {**event, "data_json": self.second})
        seq = c.execute(q["chain_head_lock"], {}).fetchone()[0] + 1
        receipt = {"receipt_id": f"rcp_{i}", "seq": seq, "action_id": aid, "effect_key": key}
        row = {"result": "committed", "document": self.document, "hash": aid, "created_at": ts}
        c.execute(q["receipt_insert"], {**receipt, **row})
        c.execute(q["chain_head_set"], {"seq": seq, "hash": aid})
        c.execute("COMMIT")


# --- statements and WAL frames per operation -------------------------------------------------


def io_per_op(conn: sqlite3.Connection, op: Callable[[int], None], first: int, n: int) -> str:
    """Statements and WAL frames per operation, counted over ``n`` untimed operations.

    Frames: the WAL is emptied first and automatic checkpoints are paused on ``conn`` (the one
    connection that writes), so the WAL's frame count afterwards is every page written.
    """
    statements = 0

    def count(_: str) -> None:
        nonlocal statements
        statements += 1

    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.set_trace_callback(count)
    try:
        for i in range(first, first + n):
            op(i)
    finally:
        conn.set_trace_callback(None)
    frames = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
    conn.execute("PRAGMA wal_autocheckpoint = 1000")
    return f"{statements / n:5.1f} statements, {frames / n:5.1f} WAL frames per op"


def store_conn(store: ctrlrun.SQLiteStateStore) -> sqlite3.Connection:
    # The bench reaches into the store for its (thread's) connection, only to count.
    return store._connection()


def compare(
    title: str,
    floor: tuple[Case, sqlite3.Connection],
    ours: tuple[Case, sqlite3.Connection],
    *,
    ops: int,
    target: float | None,
    rounds: int,
    sql_only: tuple[Case, sqlite3.Connection] | None = None,
) -> bool:
    """Interleave floor, ctrlrun (and, if given, ctrlrun's SQL alone); report and count."""
    sides = [("floor", floor), ("ctrlrun", ours)] + ([("sql only", sql_only)] if sql_only else [])
    measured = interleaved([case for _, (case, _) in sides], ops=ops, rounds=rounds)
    counted = max(ops, 200)
    notes = []
    for (label, (case, conn)), m in zip(sides, measured, strict=True):
        start = take(counted)
        if case.prepare is not None:
            case.prepare(start, counted)
        notes.append(f"{label:8s}{io_per_op(conn, case.op, start, counted)}")
        if label == "sql only":
            ratio = m.per_op_us / measured[0].per_op_us
            notes.append(f"sql only {m.per_op_us:9.1f} µs/op  = {ratio:.2f}× floor  {case.name}")
            # issue 28's target for the Python around them: at most twice the same rows in SQL
            ours, cpu = measured[1].per_op_us / m.per_op_us, measured[1].cpu_us / m.cpu_us
            notes.append(f"ctrlrun  {ours:9.2f}× sql only  (cpu time {cpu:.2f}×)  target ≤ 2×")
    return report(title, measured[0], measured[1], target, notes)


def run(durability: str, scale: float, rounds: int, *, durable_only: bool = False) -> bool:
    """Every workload at ``durability`` (only the outbox and plan steps with
    ``durable_only``); True if every target was met."""
    ops = int((300 if durability == "full" else 2000) * scale) // PLAN_STEPS * PLAN_STEPS
    ops = max(ops, PLAN_STEPS * 2)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in ("floor", "effect", "read", "approved", "durable", "replay"):
            (root / name).mkdir()
        floor = Floor(root / "floor" / "floor.db", durability)
        ok = True
        if not durable_only:
            with ctrlrun.context(agent="bench"):
                ok = protected_calls(root, floor, durability, ops, rounds)
        durable_work(root, floor, durability, ops, rounds)
    return ok


def protected_calls(root: Path, floor: Floor, durability: str, ops: int, rounds: int) -> bool:
    """With and without an effect key (the target, plus ctrlrun's SQL alone), approved."""
    two = (Case("2 × BEGIN IMMEDIATE; INSERT; COMMIT", floor.two_commits), floor.conn)
    replay = Replay(root / "replay", durability)
    ctl = open_control(root / "effect", durability)
    ok = compare(
        f"SQLite, protected call with an effect key (durability={durability})",
        two,
        (Case("@protect, effect key", protected_op(ctl, effect=True)), store_conn(ctl.store)),
        ops=ops,
        target=3,
        rounds=rounds,
        sql_only=(Case("the same statements, no pipeline", replay.op), replay.conn),
    )
    ctl = open_control(root / "read", durability)
    compare(
        f"SQLite, protected call without an effect (durability={durability})",
        two,
        (Case("@protect, no effect", protected_op(ctl, effect=False)), store_conn(ctl.store)),
        ops=ops,
        target=None,
        rounds=rounds,
    )
    ctl = open_control(root / "approved", durability)
    approved = Approved(ctl)
    compare(
        f"SQLite, approval-consuming call (durability={durability})",
        (Case("consume+reserve; record", floor.consume_and_reserve, floor.grant), floor.conn),
        (
            Case("@protect inside with_approval", approved.op, approved.prepare),
            store_conn(ctl.store),
        ),
        ops=ops,
        target=None,
        rounds=rounds,
    )
    return ok


def durable_work(root: Path, floor: Floor, durability: str, ops: int, rounds: int) -> None:
    """The outbox per message and plan steps, on one store."""
    store = ctrlrun.SQLiteStateStore(root / "durable" / "state.db", durability=durability)
    compare(
        f"SQLite, outbox enqueue + dispatch per message (batch {BATCH}, {durability})",
        (Case("enqueue; claim batch; settle each", floor.outbox), floor.conn),
        (Case("Outbox.enqueue + Dispatcher.run_once", outbox_op(store)), store_conn(store)),
        ops=ops,
        target=None,
        rounds=rounds,
    )
    plans = PlanSteps(store)
    compare(
        f"SQLite, plan steps ({PLAN_STEPS} database steps per plan, durability={durability})",
        (Case("fenced step write (+ claim, finish)", floor.plan_step), floor.conn),
        (Case("PlanRunner.run, per step", plans.op, plans.prepare), store_conn(store)),
        ops=ops,
        target=None,
        rounds=rounds,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--durability", choices=("full", "normal"), action="append")
    parser.add_argument("--repeat", type=int, default=1, help="run everything N times")
    parser.add_argument(
        "--durable-only",
        action="store_true",
        help="only the durable workloads (outbox per message, plan steps)",
    )
    parser.add_argument(
        "--plan-steps",
        type=int,
        default=10,
        help="steps per plan in the plan workload (default 10)",
    )
    args = parser.parse_args(argv)
    global PLAN_STEPS  # noqa: PLW0603 - the workloads read it; set once, before any runs
    PLAN_STEPS = max(1, args.plan_steps)
    print(
        f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]};"
        " medians of interleaved rounds"
    )
    ok = True
    for _ in range(args.repeat):
        for durability in args.durability or ("full", "normal"):
            ok &= run(
                durability,
                0.3 if args.quick else 1.0,
                5 if args.quick else 9,
                durable_only=args.durable_only,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
