"""One protected call reads as one straight line (issue 28, decision 0030): on a real SQLite
file, a sync call and an async call go from ``protect`` through ``Control`` once into
``runtime/pipeline.py`` and back, entering ``control.py`` only for its entry point, the policy
refresh and the protection check, and ``call.py`` (the refusal paths' helpers) not at all,
while still costing exactly two write transactions and writing one committed receipt.

Entries are counted as ``bench/call_path.py`` counts them: a profiler's ``call`` events of
Python functions, per file (a coroutine counts again each time it resumes), after a warm-up.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

import ctrlrun
from ctrlrun import Control, SQLiteStateStore
from ctrlrun.config import load_policy_text
from support.policies import POLICY

RUNTIME = Path(ctrlrun.__file__).resolve().parent / "runtime"
BOT = ("support-bot", "alice")
WARMUP = 5
COUNTED = 4

# Measured after the change (bench/call_path.py): sync run, refresh_policy and
# check_protection; async the same with arun resumed at each of its awaits (4) and the store
# threads looked up once. Before it: 8 and 12.
SYNC_CONTROL_ENTRIES = 3
ASYNC_CONTROL_ENTRIES = 7
# The runtime modules a call on the happy path may enter: the straight line and what it uses.
STRAIGHT_LINE = {"protect.py", "control.py", "pipeline.py", "context.py", "normalize.py"}
STRAIGHT_LINE |= {"receipts.py"}  # the receipt document and the first two events


class Entries:
    """Function entries per runtime module file, counted while ``active`` (on every thread
    given this profiler: the async path's store threads too)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.active = False
        self.lock = threading.Lock()

    def __call__(self, frame, event, arg) -> None:
        if event != "call" or not self.active:
            return
        path = Path(frame.f_code.co_filename)
        if path.parent == RUNTIME:
            with self.lock:
                self.counts[path.name] += 1

    def per_call(self) -> dict[str, float]:
        return {name: count / COUNTED for name, count in self.counts.items()}

    def counting(self, body) -> None:
        sys.setprofile(self)
        self.active = True
        try:
            body()
        finally:
            self.active = False
            sys.setprofile(None)


@pytest.fixture
def sqlite_store(tmp_path):
    opened = SQLiteStateStore(tmp_path / "state.db")
    yield opened
    opened.close()


@pytest.fixture
def entries():
    found = Entries()
    threading.setprofile(found)  # the async path's store threads start with the first call
    yield found
    threading.setprofile(None)


@pytest.fixture
def control(sqlite_store, entries):
    return Control(load_policy_text(POLICY), sqlite_store)


def test_a_sync_call_is_one_straight_line(control, sqlite_store, entries):
    ran = []

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        ran.append(payment_id)
        return {"refunded": amount}

    with ctrlrun.context(*BOT):
        for i in range(WARMUP):
            refund(f"warm_{i}", 5)
        before = sqlite_store.write_transactions

        def counted() -> None:
            for i in range(COUNTED):
                refund(f"pay_{i}", 5)

        entries.counting(counted)

    per_call = entries.per_call()
    assert per_call["control.py"] <= SYNC_CONTROL_ENTRIES
    assert per_call.get("call.py", 0) == 0
    assert per_call["pipeline.py"] >= 1
    assert set(per_call) <= STRAIGHT_LINE
    assert sqlite_store.write_transactions - before == 2 * COUNTED
    assert ran[WARMUP:] == [f"pay_{i}" for i in range(COUNTED)]
    assert sqlite_store.get_effect("refund:pay_0").state is ctrlrun.EffectState.COMMITTED
    results = [r["result"] for r in sqlite_store.receipts()]
    assert results == ["committed"] * (WARMUP + COUNTED)


def test_an_async_call_is_the_same_straight_line(control, sqlite_store, entries):
    ran = []

    @ctrlrun.protect("stripe.refund", control=control)
    async def refund(payment_id: str, amount: int):
        ran.append(payment_id)
        return {"refunded": amount}

    async def calls(prefix: str, count: int) -> None:
        with ctrlrun.context(*BOT):
            for i in range(count):
                await refund(f"{prefix}_{i}", 5)

    asyncio.run(calls("warm", WARMUP))
    before = sqlite_store.write_transactions
    entries.counting(lambda: asyncio.run(calls("pay", COUNTED)))

    per_call = entries.per_call()
    assert per_call["control.py"] <= ASYNC_CONTROL_ENTRIES
    assert per_call.get("call.py", 0) == 0
    assert per_call["pipeline.py"] >= 1
    assert set(per_call) <= STRAIGHT_LINE | {"aio.py"}
    assert sqlite_store.write_transactions - before == 2 * COUNTED
    assert ran[WARMUP:] == [f"pay_{i}" for i in range(COUNTED)]
    results = [r["result"] for r in sqlite_store.receipts()]
    assert results == ["committed"] * (WARMUP + COUNTED)


def test_a_refused_call_still_records_its_refusal_through_the_same_line(
    control, sqlite_store, entries
):
    @ctrlrun.protect("iam.grant_admin", control=control)
    def grant(user: str):
        raise AssertionError("a denied call never runs")

    with ctrlrun.context(*BOT):
        with pytest.raises(ctrlrun.ActionDenied):
            grant("eve")  # the first call of a function shape fills check_protection's cache
        with pytest.raises(ctrlrun.ActionDenied):
            entries.counting(lambda: grant("mallory"))
    assert entries.counts["pipeline.py"] >= 1
    assert entries.counts["control.py"] <= SYNC_CONTROL_ENTRIES
    receipts = sqlite_store.receipts()
    assert [(r["result"], r["decision"]) for r in receipts] == [("denied", "deny")] * 2
