"""A lost COMMIT on the transaction that carries a reconciliation's events, on a real server.

The reconciliation's two events never travel alone (decision 0008): they ride with the
resolution (settled by the effect row) or with the call's refusal (settled by its receipt). So a
COMMIT whose answer the fault proxy cuts is recognised like any other write's, and the call ends
with its usual verdict and one receipt, not with ``AmbiguousWrite``. The cut is armed from
inside the hook, so it hits exactly the transaction that follows the answer.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import ctrlrun
from ctrlrun.errors import AmbiguousEffect, DuplicateEffect
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventType

from .conftest import KEY, left_ambiguous

pytestmark = pytest.mark.postgres


def refund_whose_hook(store, executor, answer: str, arm: Callable[[], None]):
    """A refund left AMBIGUOUS whose hook arms the fault ``arm`` and then answers."""

    def hook(_key: str) -> str:
        arm()
        return answer

    return left_ambiguous(store, executor, hook)


def reconciliations(store) -> int:
    return [e.type for e in store.events()].count(EventType.RECONCILIATION_STARTED)


def test_a_lost_commit_on_the_refusal_is_recognised_by_its_receipt(
    proxied, pg_proxy, branches, executor
):
    refund = refund_whose_hook(proxied, executor, "unknown", pg_proxy.cut_after_commit)
    with ctrlrun.context("bot"), pytest.raises(AmbiguousEffect):
        refund("pay_1", 1)
    assert pg_proxy.cuts_after_commit == 1
    assert branches() == [("A1_OURS", KEY)]
    assert [r.document["result"] for r in proxied.receipts()] == ["ambiguous", "blocked"]
    assert reconciliations(proxied) == 1


def test_a_lost_commit_on_the_resolution_is_recognised_by_the_record(
    proxied, pg_proxy, branches, executor
):
    refund = refund_whose_hook(proxied, executor, "committed", pg_proxy.cut_after_commit)
    with ctrlrun.context("bot"), pytest.raises(DuplicateEffect):
        refund("pay_1", 1)
    assert pg_proxy.cuts_after_commit == 1
    assert branches() == [("A2_LANDED", KEY)]
    record = proxied.get_effect(KEY)
    assert (record.state, record.resolved_by) == (EffectState.COMMITTED, "reconcile:stripe.refund")
    assert reconciliations(proxied) == 1 and len(executor.calls) == 1


def test_a_swallowed_resolution_is_reissued_once_with_its_events(
    proxied, pg_proxy, branches, executor
):
    refund = refund_whose_hook(proxied, executor, "not_executed", pg_proxy.cut_before_commit)
    with ctrlrun.context("bot"):
        refund("pay_1", 1)
    assert pg_proxy.cuts_before_commit == 1
    assert branches() == [("A2_REISSUE", KEY)]
    record = proxied.get_effect(KEY)
    assert (record.state, record.attempt) == (EffectState.COMMITTED, 2)
    assert reconciliations(proxied) == 1 and len(executor.calls) == 2
