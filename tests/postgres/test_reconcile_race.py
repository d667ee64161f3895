"""Two processes reconcile one AMBIGUOUS record at once, on a real server.

Under READ COMMITTED both read the record AMBIGUOUS; the first resolution commits and the
second one's conditional UPDATE then matches no row. That loser must not escape the protected
call as a bare refusal with no receipt (the soak found exactly that): the record moved, so the
call asks the store once more and is refused (or admitted) with its receipt, like any other.
The interleaving is driven by holding the loser's UPDATE in the fault proxy; nothing sleeps.
"""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun.errors import DuplicateEffect, DuplicateState
from ctrlrun.kernel.effect import EffectState

from .conftest import in_thread, left_ambiguous

pytestmark = pytest.mark.postgres

KEY = "refund:pay_1"
WAIT = 30.0


def is_effect_update(sql: str) -> bool:
    """The effect's conditional move (a call of the schema's function, migration 0004)."""
    return ".ctrlrun_move_effect(" in sql and "COMMIT" not in sql


def test_the_loser_of_two_resolutions_is_refused_with_its_receipt(
    proxied, direct, pg_proxy, executor
):
    refund = left_ambiguous(proxied, executor, lambda _key: "committed")

    def second_call() -> None:
        with ctrlrun.context("bot"):
            refund("pay_1", 1)

    # the blocked call writes no effect row before it resolves (AMBIGUOUS is refused as is):
    # the first UPDATE of an effect it sends is the resolution's, after the resolution's read
    pg_proxy.hold(is_effect_update)
    call = in_thread(second_call)
    pg_proxy.wait_held(WAIT)
    direct.resolve_effect(KEY, EffectState.COMMITTED, "cli:alice")  # the other resolver wins
    assert pg_proxy.release()
    with pytest.raises(DuplicateEffect) as caught:
        call.result(WAIT)
    assert caught.value.state is DuplicateState.COMMITTED
    record = direct.get_effect(KEY)
    assert (record.state, record.resolved_by) == (EffectState.COMMITTED, "cli:alice")
    results = [r.document["result"] for r in direct.receipts()]
    assert results == ["ambiguous", "blocked"] and len(executor.calls) == 1
