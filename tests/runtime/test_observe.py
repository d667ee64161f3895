"""``mode: observe``: the policy is evaluated in full, the function runs, nothing is enforced or
reserved, and the receipt (result ``observed``) says what enforcement would have done. Real
SQLite file and real Postgres (``backend``), sync and async; switching to enforce is an edit."""

from __future__ import annotations

import asyncio
import os

import pytest

import ctrlrun
from ctrlrun import ActionDenied, ApprovalRequired, Control, DuplicateEffect
from ctrlrun.config import load_policy_text
from ctrlrun.errors import PolicyError

OBSERVED = """\
schema: ctrlrun.policy/v1
actions:
  stripe.refund:
    mode: observe
    effect: "refund:{payment_id}"
    rules:
      - when: {amount_lte: 1000}
        decision: allow
      - when: {amount_lte: 100000}
        decision: approve
      - decision: deny
  crm.read:
    decision: deny
"""
WHOLE = "schema: ctrlrun.policy/v1\nmode: observe\n" + OBSERVED.split("\n", 1)[1].replace(
    "    mode: observe\n", ""
)
ENFORCED = OBSERVED.replace("    mode: observe\n", "")


@pytest.fixture
def observed(store, clock, remote):
    control = Control(load_policy_text(OBSERVED), store, clock=clock)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        return remote(payment_id=payment_id, amount=amount)

    return refund


def _last(store) -> dict:
    return store.receipts()[-1].document


def test_each_would_have_is_recorded_and_the_function_runs(observed, store, remote):
    refund = observed
    with ctrlrun.context("bot"):
        assert refund("pay_1", 500)["ok"]  # allowed: would have run
        assert _last(store)["observed"] == {
            "would_have": None, "why": "would have run (rule[0])",
            "effect_key": "refund:pay_1", "outcome": "committed",
        }  # fmt: skip
        refund("pay_1", 500)  # the same key again: enforcement would refuse a duplicate...
        assert _last(store)["observed"]["would_have"] is None  # ...but nothing was reserved
        refund("pay_2", 50_000)
        assert _last(store)["observed"]["would_have"] == "approval_required"
        refund("pay_3", 5_000_000)
        assert _last(store)["observed"]["would_have"] == "denied"
        assert _last(store)["decision"] == "deny" and _last(store)["result"] == "observed"
    assert len(remote.calls) == 4
    assert store.get_effect("refund:pay_1") is None  # observe holds no key
    assert store.list_approvals() == ()  # nobody was asked
    assert store.verify_chain().ok


def test_an_observed_call_sees_the_key_state_enforcement_would_meet(observed, store, clock):
    refund = observed
    enforced = Control(load_policy_text(ENFORCED), store, clock=clock)

    @ctrlrun.protect("stripe.refund", control=enforced)
    def real(payment_id: str, amount: int):
        return "paid"

    with ctrlrun.context("bot"):
        assert real("pay_9", 500) == "paid"
        refund("pay_9", 500)
        assert _last(store)["observed"]["would_have"] == "duplicate"
        assert "already committed" in _last(store)["observed"]["why"]
        with pytest.raises(DuplicateEffect):  # and the observed call did not disturb it
            real("pay_9", 500)


def test_an_executor_error_is_recorded_and_raised(observed, store, remote):
    refund = observed
    remote.fail_with.append(TimeoutError("reply lost"))
    with ctrlrun.context("bot"), pytest.raises(TimeoutError):
        refund("pay_4", 500)
    receipt = _last(store)
    assert receipt["result"] == "observed" and receipt["observed"]["outcome"] == "ambiguous"
    assert receipt["error"].startswith("TimeoutError: reply lost")
    assert store.get_effect("refund:pay_4") is None


def test_a_whole_policy_observed_covers_unknown_actions_and_unrenderable_keys(store, clock):
    control = Control(load_policy_text(WHOLE), store, clock=clock)
    ran = []

    @ctrlrun.protect("billing.unknown", control=control)
    def unknown(x: int):
        ran.append(x)
        return x

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: object, amount: int):
        ran.append(payment_id)

    with ctrlrun.context("bot"):
        assert unknown(7) == 7
        assert _last(store)["observed"]["would_have"] == "denied"
        assert _last(store)["decision_reason"] == "unknown_action"
        refund(True, 5)  # a bool cannot render an effect key: enforcement denies it
        assert _last(store)["decision_reason"] == "effect_key_error"
    assert ran == [7, True]


def test_async_calls_are_observed_the_same_way(store, clock, remote):
    control = Control(load_policy_text(OBSERVED), store, clock=clock)

    @ctrlrun.protect("stripe.refund", control=control)
    async def refund(payment_id: str, amount: int):
        return remote(payment_id=payment_id, amount=amount)

    async def main():
        with ctrlrun.context("bot"):
            await refund("pay_a", 50_000)
            await refund("pay_a", 50_000)

    asyncio.run(main())
    assert [r["observed"]["would_have"] for r in store.receipts()] == ["approval_required"] * 2
    assert len(remote.calls) == 2 and store.list_approvals() == ()


def test_switching_to_enforce_is_an_edit(tmp_path, monkeypatch):
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(OBSERVED)
    control = Control.from_file(str(path), create=True)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        return "ok"

    try:
        with ctrlrun.context("bot"):
            assert refund("pay_1", 50_000) == "ok"
            before = os.stat(path).st_mtime_ns
            path.write_text(ENFORCED)
            os.utime(path, ns=(before + 1_000_000, before + 1_000_000))
            with pytest.raises(ApprovalRequired):
                refund("pay_1", 50_000)
            with pytest.raises(ActionDenied):
                refund("pay_2", 5_000_000)
    finally:
        control.store.close()


def test_the_loader_is_strict_and_the_mode_is_a_decision_input():
    with pytest.raises(PolicyError, match="mode"):
        load_policy_text(OBSERVED.replace("mode: observe", "mode: watch"))
    with pytest.raises(PolicyError, match="mode"):
        load_policy_text("schema: ctrlrun.policy/v1\nmode: [observe]\nactions: {}\n")
    assert load_policy_text(OBSERVED).policy_hash != load_policy_text(ENFORCED).policy_hash
    assert load_policy_text(WHOLE).policy_hash != load_policy_text(ENFORCED).policy_hash
    explicit = ENFORCED.replace("    effect:", "    mode: enforce\n    effect:", 1)
    assert load_policy_text(explicit).observes("stripe.refund") is False
    assert load_policy_text(WHOLE).observes("anything.else") is True
