"""Named mutations of the kernel, applied in-process (``apply_mutation(name, monkeypatch.setattr)``)
and in worker subprocesses (``inject/sitecustomize.py`` with ``CTRLRUN_TEST_MUTATION``).

* ``no-duplicate-guard``: the reservation grants an attempt even when the planner refused it
  as a duplicate (committed or in progress) — the executor runs again.
* ``refuses-everything``: every reservation is refused as in progress — nothing ever runs, so
  a refusal asserted without a positive control would pass.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ctrlrun.errors import DuplicateEffect, DuplicateState
from ctrlrun.kernel.effect import Reservation
from ctrlrun.store.ops.effects import get_effect_in_txn


def _no_duplicate_guard(real: Callable[..., Any]) -> Callable[..., Any]:
    def reserve_in_txn(txn, **kwargs):
        try:
            return real(txn, **kwargs)
        except DuplicateEffect:
            record = get_effect_in_txn(txn, kwargs["effect_key"])
            attempt = record.attempt if record is not None else 1
            expiry = txn.now + kwargs["lease"]
            return Reservation(kwargs["effect_key"], kwargs["action_id"], attempt, expiry)

    return reserve_in_txn


def _refuses_everything(real: Callable[..., Any]) -> Callable[..., Any]:
    def reserve_in_txn(txn, **kwargs):
        raise DuplicateEffect(
            "mutated: refuse everything",
            state=DuplicateState.IN_PROGRESS,
            effect_key=kwargs["effect_key"],
        )

    return reserve_in_txn


MUTATIONS = {
    "no-duplicate-guard": ("ctrlrun.store.ops.actions", "reserve_in_txn", _no_duplicate_guard),
    "refuses-everything": ("ctrlrun.store.ops.actions", "reserve_in_txn", _refuses_everything),
}


def apply_mutation(name: str, set_attribute: Callable[[Any, str, Any], None] = setattr) -> None:
    module_name, attribute, mutate = MUTATIONS[name]
    module = importlib.import_module(module_name)
    set_attribute(module, attribute, mutate(getattr(module, attribute)))
