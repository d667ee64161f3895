"""A committed effect names the receipt that committed it (issue 28), on both stores: a
duplicate call is refused naming that receipt from the record alone, where it used to search
every receipt by action (no index serves that search); a record committed without it (a
person's resolution) is still answered by the search."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import ctrlrun
from ctrlrun import AlreadyCommitted, EffectState


def no_search(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[Any]:
    """Record every search of the receipts by action on ``store`` (there must be none)."""
    searched: list[Any] = []
    receipts = store.receipts

    def spied(action_id: str | None = None) -> Any:
        searched.append(action_id)
        return receipts(action_id)

    monkeypatch.setattr(store, "receipts", spied)
    return searched


def test_the_committed_record_keeps_its_receipt(refund, store):
    with ctrlrun.context("bot"):
        refund("pay_1", 5)
    [receipt] = store.receipts()
    record = store.get_effect("refund:pay_1")
    assert record.state is EffectState.COMMITTED
    assert record.committed_receipt_id == receipt.receipt_id


def test_a_duplicate_names_it_without_searching_the_receipts(refund, remote, store, monkeypatch):
    with ctrlrun.context("bot"):
        refund("pay_1", 5)
        [receipt] = store.receipts()
        searched = no_search(monkeypatch, store)
        with pytest.raises(AlreadyCommitted) as duplicate:
            refund("pay_1", 5)
    assert duplicate.value.receipt_id == receipt.receipt_id and searched == []
    assert duplicate.value.result == {"ok": True, "n": 1} and len(remote.calls) == 1
    assert store.receipts()[-1].document["result"] == "blocked"


def test_a_failed_or_ambiguous_outcome_names_no_committed_receipt(refund, remote, store):
    remote.fail_with.append(ctrlrun.NotExecuted("declined"))
    remote.fail_with.append(TimeoutError("lost"))
    with ctrlrun.context("bot"):
        with pytest.raises(ctrlrun.NotExecuted):
            refund("pay_1", 5)
        assert store.get_effect("refund:pay_1").committed_receipt_id is None
        with pytest.raises(TimeoutError):
            refund("pay_1", 5)
    record = store.get_effect("refund:pay_1")
    assert record.state is EffectState.AMBIGUOUS and record.committed_receipt_id is None


def test_a_resolved_commit_is_answered_by_searching_the_receipts(refund, remote, store):
    remote.fail_with.append(TimeoutError("lost"))
    with ctrlrun.context("bot"), pytest.raises(TimeoutError):
        refund("pay_1", 5)
    store.resolve_effect("refund:pay_1", EffectState.COMMITTED, "alice")
    assert store.get_effect("refund:pay_1").committed_receipt_id is None
    with ctrlrun.context("bot"), pytest.raises(AlreadyCommitted) as duplicate:
        refund("pay_1", 5)
    assert len(remote.calls) == 1  # the search answers as it always did (None: no receipt
    # of that action says committed: its attempt's receipt says ambiguous)
    assert duplicate.value.receipt_id is None


def test_an_async_duplicate_names_it_without_searching_too(control, store, monkeypatch):
    @ctrlrun.protect("stripe.refund", control=control)
    async def refund(payment_id: str, amount: int):
        await asyncio.sleep(0)
        return {"refunded": amount}

    async def call() -> Any:
        with ctrlrun.context("bot"):
            return await refund("pay_1", 5)

    asyncio.run(call())
    [receipt] = store.receipts()
    searched = no_search(monkeypatch, store)
    with pytest.raises(AlreadyCommitted) as duplicate:
        asyncio.run(call())
    assert duplicate.value.receipt_id == receipt.receipt_id and searched == []
    assert duplicate.value.result == {"refunded": 5}
