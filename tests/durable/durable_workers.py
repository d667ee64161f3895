"""Entry points for the real child processes of the durable tests (spawned, then raced or
killed with SIGKILL), on a SQLite file or the test Postgres (``_store``). Each counts its
external calls with exclusive-create marker files: a second call of the same thing fails
loudly (``FileExistsError``) instead of passing silently."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from ctrlrun.config import load_policy_file
from ctrlrun.testing import ManualClock
from support.clocks import DEFAULT_START as START  # the parent's clock starts here too


def mark(folder: str | Path, name: str) -> None:
    """Record one external call ``name``: exclusive create, so a repeat raises."""
    fd = os.open(os.path.join(folder, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)


def _store(db: str | tuple[str, str], start: datetime | None) -> Any:
    """A SQLite file path (on a frozen clock), or ``(url, schema)`` of the test Postgres (on the
    server's clock: the parent moves its deadlines instead)."""
    if isinstance(db, tuple):
        from ctrlrun.postgres import PostgresStateStore

        url, schema = db
        return PostgresStateStore(url, schema=schema)
    from ctrlrun.store.sqlite import SQLiteStateStore

    return SQLiteStateStore(db, clock=ManualClock(start or START))


def race_outbox_claim(db: str, calls: str, barrier: Any, results: Any) -> None:
    """Claim one batch of one message behind the barrier; deliver whatever was claimed."""
    from ctrlrun.durable import Dispatcher

    def handler(message: Any) -> None:
        mark(calls, f"sent-{message.message_id}")

    dispatcher = Dispatcher(_store(db, None), handler, batch=1)
    barrier.wait(timeout=60)
    results.put((os.getpid(), [d.message_id for d in dispatcher.run_once()]))


def deliver_then_hang(db: Any, calls: str, inside: Any, topic: str) -> None:
    """Claim the message of ``topic``, record the send, then hang inside the handler until
    killed (the parent SIGKILLs this process while it is here)."""
    from ctrlrun.durable import Dispatcher

    def handler(message: Any) -> None:
        mark(calls, f"{topic}-1")
        inside.set()
        inside_forever()

    Dispatcher(
        _store(db, None), handler, topics=[topic], on_unknown="park" if topic == "pay" else "retry"
    ).run_once()


def inside_forever() -> None:
    """Block until killed (bounded, so a test that fails to kill does not hang CI forever)."""
    import threading

    threading.Event().wait(120)
    os._exit(3)


def run_plan_then_hang(
    db: Any, policy: str, calls: str, plan_id: str, inside: Any, hang_in: str
) -> None:
    """Run ``plan_id``; hang inside step ``hang_in`` (``db`` or ``external``) until killed."""
    from durable_steps import make_steps

    from ctrlrun import Control

    store = _store(db, None)
    steps = make_steps(calls, hang_in=hang_in, inside=inside)
    control = Control(load_policy_file(policy), store, clock=ManualClock(START))
    from ctrlrun.durable import PlanRunner

    PlanRunner(store, steps, control=control).run(plan_id)


def start_then_hang(db: Any, calls: str, operation_id: str, inside: Any) -> None:
    """Start ``operation_id``; the starter records the remote call, then hangs until killed."""
    from ctrlrun.durable import Operations

    def starter(operation: Any) -> str:
        mark(calls, f"start-{operation.operation_id}")
        inside.set()
        inside_forever()
        return "never"

    Operations(_store(db, None)).start(operation_id, starter)


def race_operation_start(
    db: str, calls: str, operation_id: str, barrier: Any, results: Any
) -> None:
    """Try to start ``operation_id`` behind the barrier; report whether this process started it."""
    from ctrlrun.durable import Operations

    started = []

    def starter(operation: Any) -> str:
        mark(calls, f"start-{operation.operation_id}")
        started.append(os.getpid())
        return f"remote-{os.getpid()}"

    ops = Operations(_store(db, None))
    barrier.wait(timeout=60)
    ops.start(operation_id, starter)
    results.put((os.getpid(), bool(started)))


def race_plan_run(db: str, calls: str, plan_id: str, barrier: Any, results: Any) -> None:
    """Run ``plan_id`` behind the barrier; report what this process executed (or why not)."""
    from durable_steps import make_steps

    from ctrlrun.durable import PlanRunner
    from ctrlrun.errors import PlanRefused

    runner = PlanRunner(_store(db, None), make_steps(calls))
    barrier.wait(timeout=60)
    try:
        results.put((os.getpid(), list(runner.run(plan_id).ran)))
    except PlanRefused as exc:
        results.put((os.getpid(), str(exc.reason)))
