"""Eight OS processes racing one effect key behind a barrier, on any store URL.

Each child opens the store named by its URL (``sqlite:///…`` or ``postgresql://…?ctrlrun_schema=``),
proves it imported the tree under test, waits at the barrier and makes one protected call whose
executor exclusive-creates a marker file, so a second execution anywhere fails loudly.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from pathlib import Path
from typing import Any

import ctrlrun
from ctrlrun.config import load_policy_file

SOURCE = str(Path(ctrlrun.__file__).resolve().parent)


def contend(store_url: str, policy: str, calls: str, barrier: Any, results: Any) -> None:
    """One racer (runs in a child process)."""
    import ctrlrun
    from ctrlrun.store import open_store

    assert str(Path(ctrlrun.__file__).resolve().parent) == SOURCE  # the tree under test
    control = ctrlrun.Control(load_policy_file(policy), open_store(store_url))

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        fd = os.open(os.path.join(calls, "executed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return "refunded"

    barrier.wait(timeout=60)
    with ctrlrun.context(agent=f"agent-{os.getpid()}"):
        try:
            results.put((os.getpid(), refund("pay_race", 5000)))
        except ctrlrun.DuplicateEffect as exc:
            results.put((os.getpid(), f"duplicate:{exc.state}"))
        except ctrlrun.EffectTemplateChanged:
            results.put((os.getpid(), "effect_template_changed"))
        except BaseException as exc:  # anything else is a finding, reported to the parent
            results.put((os.getpid(), f"error:{type(exc).__name__}:{exc}"))


def contend_rekeyed(
    store_url: str, policies: Any, calls: str, barrier: Any, results: Any, index: Any
) -> None:
    """A racer whose policy is one of ``policies`` (alternating, by a shared counter): half
    key the refund ``refund:{payment_id}``, half ``refund:{payment_id}:{amount}``."""
    with index.get_lock():
        mine, index.value = index.value, index.value + 1
    policy = policies[mine % len(policies)]
    try:
        contend(store_url, policy, calls, barrier, results)
    except BaseException as exc:  # pragma: no cover - reported, never silent
        results.put((os.getpid(), f"error:{type(exc).__name__}:{exc}"))


def race_rekeyed(
    ctx: Any, store_url: str, policies: list[Path], calls: Path, n: int = 8
) -> list[str]:
    """``n`` racers under two policies keying one refund differently; their sorted answers.
    Asserts that exactly one executed."""
    index = ctx.Value("i", 0)
    outcomes = run_racers(
        ctx, contend_rekeyed, (store_url, [str(p) for p in policies], str(calls)), n, index
    )
    assert os.listdir(calls) == ["executed"]
    return sorted(answer for _, answer in outcomes)


def ask_at_once(store_url: str, policy: str, barrier: Any, results: Any, inside: Any) -> None:
    """A racer making the identical call that needs a person: answers its request id.

    Inside its request transaction, having found no request, it waits at ``inside`` for the
    others (2 s at most): without serialisation all of them would be there, each about to
    make its own request; with it, the first waits alone, gives up and goes on."""
    import threading

    import ctrlrun.store.ops.approvals as ops
    from ctrlrun.store import open_store

    found_none = ops.plan_waiting

    def plan_waiting(records: Any, now: Any) -> Any:
        found = found_none(records, now)
        if found is None:
            with contextlib.suppress(threading.BrokenBarrierError):
                inside.wait(timeout=2)
        return found

    ops.plan_waiting = plan_waiting

    control = ctrlrun.Control(load_policy_file(policy), open_store(store_url))

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        return "refunded"

    barrier.wait(timeout=60)
    with ctrlrun.context(agent="support-bot"):
        try:
            refund("pay_big", 200_000)
            results.put((os.getpid(), "ran"))
        except ctrlrun.ApprovalRequired as exc:
            results.put((os.getpid(), exc.request_id))
        except BaseException as exc:  # anything else is a finding, reported to the parent
            results.put((os.getpid(), f"error:{type(exc).__name__}:{exc}"))


def run_racers(
    ctx: Any, target: Any, args: tuple[Any, ...], n: int, *extra: Any
) -> list[tuple[int, Any]]:
    """Start ``n`` processes of ``target(*args, barrier, results)`` from ``ctx``, all before
    any is collected; their ``(pid, answer)``. Asserts that each exited cleanly and answered
    once from a process of its own."""
    barrier, results = ctx.Barrier(n), ctx.Queue()
    workers = [ctx.Process(target=target, args=(*args, barrier, results, *extra)) for _ in range(n)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=90) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert all(worker.exitcode == 0 for worker in workers)
    assert len({pid for pid, _ in outcomes}) == n and os.getpid() not in dict(outcomes)
    return outcomes


def race(ctx: Any, store_url: str, policy: Path, calls: Path, n: int = 8) -> list[str]:
    """Run ``n`` racers from multiprocessing context ``ctx``; their sorted answers. Asserts
    that every child exited cleanly, answered once, and that exactly one executed."""
    outcomes = run_racers(ctx, contend, (store_url, str(policy), str(calls)), n)
    assert os.listdir(calls) == ["executed"]
    answers = sorted(answer for _, answer in outcomes)
    assert answers.count("refunded") == 1, answers
    assert set(answers) - {"refunded"} <= {"duplicate:in_progress", "duplicate:committed"}
    return answers


def preloaded_processes() -> Any:
    """A context whose children fork from a clean single-threaded server that already imported
    ctrlrun and psycopg: real processes that do not spend the test importing on two cores."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["ctrlrun", "ctrlrun.postgres", "ctrlrun.store.postgres.atopen"])
    return ctx
