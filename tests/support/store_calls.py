"""The two store calls of a protected call, made by hand for the store's own tests: one
``start`` and one ``finish`` for every test that drives a store directly."""

from __future__ import annotations

from typing import Any

from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.receipt import Receipt
from ctrlrun.store.protocol import FinishRequest, Started, StartRequest

KEY = "refund:pay_1"


def start(store: Any, action_id: str = "act_1", key: str | None = KEY, **kwargs: Any) -> Started:
    """Transaction 1 for ``action_id`` on ``key`` (``kwargs``: the rest of ``StartRequest``)."""
    return store.start_action(StartRequest(action_id=action_id, effect_key=key, **kwargs))


def finish(
    store: Any,
    action_id: str = "act_1",
    key: str | None = KEY,
    attempt: int = 1,
    outcome: EffectState = EffectState.COMMITTED,
    **kwargs: Any,
) -> Receipt:
    """Transaction 2: ``outcome`` for that attempt, with its receipt; an outcome other than
    committed carries an error (``kwargs`` may name another, or the rest of the request)."""
    kwargs.setdefault(
        "error", None if outcome is EffectState.COMMITTED else "NotExecuted: declined"
    )
    receipt = {
        "receipt_id": f"rcp_{action_id}_{attempt}",
        "action_id": action_id,
        "result": str(outcome),
        "effect_key": key,
    }
    return store.finish_action(
        FinishRequest(
            action_id=action_id,
            receipt=receipt,
            effect_key=key,
            attempt=attempt,
            outcome=outcome,
            **kwargs,
        )
    )
