"""Eight OS processes race one effect key behind a barrier: exactly one executes."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest

from support.policies import POLICY


def contend(policy: str, db: str, calls: str, barrier, results) -> None:
    import ctrlrun

    control = ctrlrun.Control(ctrlrun.Policy.from_file(policy), ctrlrun.SQLiteStateStore(db))

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        # exclusive create: a second execution anywhere would fail loudly here
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
        except BaseException as exc:  # anything else is a finding, reported to the parent
            results.put((os.getpid(), f"error:{type(exc).__name__}:{exc}"))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_eight_processes_one_winner(tmp_path: Path):
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    db, calls = tmp_path / "state.db", tmp_path / "calls"
    calls.mkdir()
    import ctrlrun

    ctrlrun.SQLiteStateStore(db).close()  # migrate once, so the race is on the key alone
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    workers = [
        ctx.Process(target=contend, args=(str(policy), str(db), str(calls), barrier, results))
        for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=90) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert all(worker.exitcode == 0 for worker in workers)
    assert len({pid for pid, _ in outcomes}) == 8
    answers = sorted(answer for _, answer in outcomes)
    assert answers.count("refunded") == 1, answers
    assert all(
        a in ("duplicate:in_progress", "duplicate:committed") for a in answers if a != "refunded"
    ), answers
    assert os.listdir(calls) == ["executed"]
    store = ctrlrun.SQLiteStateStore(db)
    assert store.get_effect("refund:pay_race").state is ctrlrun.EffectState.COMMITTED
    results_ = [r.document["result"] for r in store.receipts()]
    assert results_.count("committed") == 1 and results_.count("blocked") == 7
    assert store.verify_chain().ok
