"""Reconcile hooks: asking the world whether an AMBIGUOUS effect happened.

A hook is ``(effect_key) -> "committed" | "not_executed" | "unknown"``; a hook that also takes
keyword parameters ``attempt`` and/or ``idempotency_token`` is given the AMBIGUOUS attempt and
the token its executor was handed, so it can ask the provider about exactly that attempt. For
async protected functions the hook may be an ``async def``. It is consulted at most once per
call, when an AMBIGUOUS record refuses a new reservation. ``committed`` and ``not_executed``
resolve the record (to COMMITTED / FAILED) on the hook's word — only the attempt that was
AMBIGUOUS when the hook was asked; ``unknown``, a hook that raises an ``Exception``, or any
other answer changes nothing.

The reconciliation's two events never travel in a transaction of their own: they go with the
resolution, or, when nothing was resolved, with the call's next transaction (its reservation or
its refusal, with a receipt). Every transaction that carries them therefore writes a row that a
re-read after a lost COMMIT can recognise (docs/decisions/0008-reconcile-evidence.md).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from ctrlrun.errors import InvalidArgument, Refused
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.effect import EffectState, idempotency_token_for
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.runtime.receipts import describe

log = logging.getLogger("ctrlrun")

ReconcileOutcome = Literal["committed", "not_executed", "unknown"]
Reconcile = Callable[..., Any]  # (effect_key, [attempt=, idempotency_token=]) -> outcome

_EXTRAS: Final = ("attempt", "idempotency_token")


def hook_keywords(hook: Reconcile) -> frozenset[str]:
    """Which of ``attempt`` / ``idempotency_token`` the hook accepts as keywords."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the effect key only
        return frozenset()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return frozenset(_EXTRAS)
    return frozenset(
        p.name for p in parameters if p.name in _EXTRAS and p.kind is not p.POSITIONAL_ONLY
    )


_TARGETS: Final = {"committed": EffectState.COMMITTED, "not_executed": EffectState.FAILED}


def ask(hook: Reconcile, effect_key: str, attempt: int | None) -> tuple[str, dict[str, Any]]:
    """The hook's answer (``unknown`` unless it gave a valid one) and why."""
    extras: dict[str, Any] = {}
    wanted = hook_keywords(hook)
    if "attempt" in wanted:
        extras["attempt"] = attempt
    if "idempotency_token" in wanted:
        extras["idempotency_token"] = (
            idempotency_token_for(effect_key, attempt) if attempt is not None else None
        )
    try:
        answer = hook(effect_key, **extras)
    except Exception as exc:  # a broken hook is an unknown, never a verdict
        log.warning("ctrlrun: reconcile hook for %s raised: %s", effect_key, exc)
        return "unknown", {"reason": "raised", "error": describe(exc)}
    if inspect.isawaitable(answer):  # an async hook on a sync call: never awaited, no verdict
        if inspect.iscoroutine(answer):
            answer.close()
        log.warning("ctrlrun: async reconcile hook for %s on a sync call", effect_key)
        return "unknown", {"reason": "async_hook_on_sync_call"}
    if answer in ("committed", "not_executed", "unknown"):
        return str(answer), {}
    log.warning("ctrlrun: reconcile hook for %s returned %r", effect_key, answer)
    return "unknown", {"reason": "invalid_return", "returned": repr(answer)[:200]}


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What consulting the hook came to. ``retry``: one more reservation attempt is worth
    making (the record was resolved, or moved meanwhile). ``unwritten``: the reconciliation's
    events not yet stored, which the caller must write with its next transaction."""

    retry: bool
    unwritten: tuple[EventDraft, ...]


def reconcile_blocked(store: Any, action: Action, effect_key: str, hook: Reconcile) -> Reconciled:
    """Consult ``hook`` about the AMBIGUOUS ``effect_key`` and apply its verdict.

    The answer settles only the attempt that was AMBIGUOUS before the hook was asked: by the
    time it answers, that attempt may have been resolved, the key re-reserved and a *new*
    attempt left AMBIGUOUS, which the hook was never asked about and may have executed.
    A resolution stores the reconciliation's events in its own transaction; otherwise they come
    back ``unwritten``.
    """
    before = store.get_effect(effect_key)
    asked = before.attempt if before is not None else None
    answer, detail = ask(hook, effect_key, asked)
    events = (
        EventDraft(
            EventType.RECONCILIATION_STARTED,
            action.action_id,
            effect_key,
            data={"trigger": "blocking"},
        ),
        EventDraft(
            EventType.RECONCILIATION_RESOLVED,
            action.action_id,
            effect_key,
            data={"outcome": answer, **detail},
        ),
    )
    target = _TARGETS.get(answer)
    if target is None:
        return Reconciled(retry=False, unwritten=events)
    if asked is None:  # nothing was AMBIGUOUS to settle: the record went away or never was
        return Reconciled(retry=True, unwritten=events)
    try:
        store.resolve_effect(
            effect_key,
            target,
            f"reconcile:{action.name}",
            by="reconcile",
            attempt=asked,
            events=events,
        )
    except (InvalidArgument, Refused):
        # Moved meanwhile (resolved by another reconciler or a person, or re-reserved): the
        # caller asks the store once more and gets its verdict, with a receipt, like any call.
        # On Postgres two resolutions can both read AMBIGUOUS; the loser is a Refused.
        log.info("ctrlrun: %s moved before the reconcile answer could be applied", effect_key)
        return Reconciled(retry=True, unwritten=events)
    return Reconciled(retry=True, unwritten=())
