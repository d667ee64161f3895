"""Eight OS processes racing one durable claim on Postgres, behind a barrier.

Each child opens the real ``PostgresStateStore`` on the test's schema, proves it imported the
tree under test, waits at the barrier, and makes one claim — an outbox dispatch, a plan run,
an operation start. Every external effect (a delivery, a step's execution, a remote start) is
an exclusive-create marker file, so a second one anywhere fails loudly in that child and is
reported to the parent. Children come from ``support.race.preloaded_processes`` (a forkserver
that already imported ctrlrun and psycopg).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .race import SOURCE, preloaded_processes, run_racers


def mark(calls: str, name: str) -> None:
    """Record one external effect ``name``: exclusive create, so a repeat raises."""
    fd = os.open(os.path.join(calls, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)


def _outbox(store: Any, calls: str, target: str) -> Callable[[], Any]:
    from ctrlrun.durable import Dispatcher

    dispatcher = Dispatcher(store, lambda m: mark(calls, f"sent-{m.message_id}"), batch=1)
    return lambda: [d.message_id for d in dispatcher.run_once()]


def _plan(store: Any, calls: str, target: str) -> Callable[[], Any]:
    from ctrlrun.durable import PlanRunner, Steps
    from ctrlrun.errors import PlanRefused

    steps = Steps()

    @steps.db("inventory.reserve")
    def reserve(ctx: Any) -> dict[str, Any]:
        from psycopg import sql

        ctx.connection.execute(
            sql.SQL("INSERT INTO {} (item, qty) VALUES (%s, %s)").format(
                sql.Identifier(ctx.schema, "inventory")
            ),
            (ctx.arguments["item"], ctx.arguments["qty"]),
        )
        mark(calls, f"db-{ctx.step_index}-{os.getpid()}")  # every execution, committed or not
        return {"reserved": ctx.arguments["qty"]}

    runner = PlanRunner(store, steps)

    def run() -> Any:
        try:
            return list(runner.run(target).ran)
        except PlanRefused as exc:
            return str(exc.reason)

    return run


def _operation(store: Any, calls: str, target: str) -> Callable[[], Any]:
    from ctrlrun.durable import Operations

    started: list[str] = []

    def starter(operation: Any) -> str:
        mark(calls, f"start-{operation.operation_id}")
        started.append(operation.operation_id)
        return f"remote-{os.getpid()}"

    ops = Operations(store)
    return lambda: (ops.start(target, starter).remote_id, started)


CLAIMS: dict[str, Callable[[Any, str, str], Callable[[], Any]]] = {
    "outbox": _outbox,
    "plan": _plan,
    "operation": _operation,
}


def contend(
    kind: str, url: str, schema: str, calls: str, target: str, barrier: Any, results: Any
) -> None:
    """One racer (runs in a child process)."""
    try:
        import ctrlrun
        from ctrlrun.postgres import PostgresStateStore

        assert str(Path(ctrlrun.__file__).resolve().parent) == SOURCE  # the tree under test
        store = PostgresStateStore(url, schema=schema)
        claim = CLAIMS[kind](store, calls, target)
        barrier.wait(timeout=60)
        answer = claim()
        store.close()
        results.put((os.getpid(), answer))
    except BaseException as exc:  # a finding (a second effect, a store error): report it
        results.put((os.getpid(), f"error:{type(exc).__name__}:{exc}"))


def race(kind: str, url: str, schema: str, calls: Path, target: str, n: int = 8) -> list[Any]:
    """Run ``n`` racers of ``kind`` on ``target``; their answers. Asserts that every child
    arrived, answered once from a distinct process, and exited cleanly."""
    args = (kind, url, schema, str(calls), target)
    outcomes = run_racers(preloaded_processes(), contend, args, n)
    answers = [answer for _, answer in outcomes]
    assert not [a for a in answers if isinstance(a, str) and a.startswith("error:")], answers
    return answers
