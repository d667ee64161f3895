"""A protected function that does not fit its policy is refused with the whole list, before
anything is written, the first time a ``Control`` meets it; sync and async, on both stores."""

from __future__ import annotations

import asyncio
import os

import pytest

import ctrlrun
from ctrlrun import Control, ProtectionMismatch
from ctrlrun.config import load_policy_text

MISFIT = """\
schema: ctrlrun.policy/v1
actions:
  stripe.refund:
    effect: "refund:{payment_id}"
    resource: "customer:{customer}"
    rules:
      - when: {amount_lte: 100, currency_eq: "eur"}
        decision: allow
      - decision: deny
"""

FIXED = """\
schema: ctrlrun.policy/v1
actions:
  stripe.refund:
    effect: "refund:{payment_id}"
    rules:
      - when: {amount_lte: 100}
        decision: allow
      - decision: deny
"""

EXPECTED = (
    "stripe.refund: the resource template 'customer:{customer}' names 'customer', which the"
    " function has no parameter for",
    "stripe.refund: rule 1 tests 'currency_eq', but the function has no parameter 'currency'",
)


@pytest.fixture
def misfit(store, clock):
    return Control(load_policy_text(MISFIT), store, clock=clock)


def test_a_misfit_is_refused_with_every_finding_and_nothing_written(misfit, store):
    calls = []

    @ctrlrun.protect("stripe.refund", control=misfit)
    def refund(payment_id: str, amount: int):
        calls.append(payment_id)

    with ctrlrun.context("bot"), pytest.raises(ProtectionMismatch) as caught:
        refund("pay_1", 5)
    assert caught.value.findings == EXPECTED
    assert caught.value.reason == "protection_mismatch"
    assert "ctrlrun check" in caught.value.message
    assert calls == [] and not store.receipts() and store.get_effect("refund:pay_1") is None


def test_an_async_misfit_is_refused_the_same_way(misfit, store):
    @ctrlrun.protect("stripe.refund", control=misfit)
    async def refund(payment_id: str, amount: int):
        return payment_id

    async def main():
        with ctrlrun.context("bot"):
            await refund("pay_1", 5)

    with pytest.raises(ProtectionMismatch) as caught:
        asyncio.run(main())
    assert caught.value.findings == EXPECTED and not store.receipts()


def test_the_function_s_own_templates_replace_the_policy_s(misfit, store):
    @ctrlrun.protect(
        "stripe.refund", control=misfit, resource="payment:{payment_id}", exclude=("note",)
    )
    def refund(payment_id: str, amount: int, currency: str, note: str = ""):
        return amount

    with ctrlrun.context("bot"):
        assert refund("pay_1", 5, "eur") == 5
    assert [r["result"] for r in store.receipts()] == ["committed"]


def test_a_fixed_policy_file_lets_the_next_call_run(tmp_path, monkeypatch):
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(MISFIT)
    control = Control.from_file(str(path), create=True)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        return amount

    try:
        with ctrlrun.context("bot"):
            with pytest.raises(ProtectionMismatch):
                refund("pay_1", 5)
            before = os.stat(path).st_mtime_ns
            path.write_text(FIXED)
            os.utime(path, ns=(before + 1_000_000, before + 1_000_000))
            assert refund("pay_1", 5) == 5
    finally:
        control.store.close()
