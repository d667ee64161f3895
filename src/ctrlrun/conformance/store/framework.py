"""What every case is made of: the case record, its two verdict exceptions, and the helpers
that build requests and assert refusals by name.

A case is a function of a ``CaseContext``. It returns a short description of what it
established (a pass), raises ``CaseFailed`` with the reason, or raises ``NotApplicable`` with a
true reason. Any other exception a store raises fails the case, naming the exception.
Refusals are asserted by class *and* by their ``reason``/``state`` fields, never by class alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from ctrlrun._time import ManualClock
from ctrlrun.errors import NotExecuted
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalRequestDraft
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.receipt import Receipt
from ctrlrun.store.protocol import FinishRequest, Started, StartRequest, StateStore

from .backends import Scratch

E = TypeVar("E", bound=BaseException)

APPROVER = "conformance-approver"
HASH_A = "sha256:" + "a1" * 32
HASH_B = "sha256:" + "b2" * 32


class CaseFailed(Exception):
    """The store broke the contract; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotApplicable(Exception):
    """The case cannot run on this backend, for a reason the suite has checked is true."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class CaseContext:
    """What a case gets: private storage, the contender count, and a clock it may move."""

    scratch: Scratch
    processes: int
    name: str
    clock: ManualClock = field(default_factory=ManualClock)

    def key(self, n: int | str = 1) -> str:
        """An effect key private to this case."""
        return f"conformance:{self.name}:{n}"

    def action(self, n: int | str = 1) -> str:
        """An action id private to this case."""
        return f"act-{self.name}-{n}"


@dataclass(frozen=True, slots=True)
class Case:
    """One named check of the store contract. ``contract`` is the sentence it proves."""

    suite: str
    name: str
    contract: str
    run: Callable[[CaseContext], str]

    @classmethod
    def of(cls, suite: str, name: str, run: Callable[[CaseContext], str]) -> Case:
        """The case ``suite/name`` whose contract is ``run``'s docstring (one paragraph)."""
        return cls(suite, name, " ".join((run.__doc__ or "").split()), run)


def check(condition: object, reason: str) -> None:
    """Fail the case with ``reason`` unless ``condition`` holds."""
    if not condition:
        raise CaseFailed(reason)


def expect_refusal(
    what: str,
    call: Callable[[], object],
    kind: type[E],
    **fields: object,
) -> E:
    """Run ``call``; it must raise ``kind`` whose named fields equal ``fields``.

    ``what`` names the attempt in the failure reason. Admission, ``NotExecuted``, another
    class, or another reason each fail the case with a reason that says which.
    """
    expected = _describe(kind, fields)
    try:
        call()
    except kind as exc:
        wrong = {k: getattr(exc, k, None) for k, v in fields.items() if getattr(exc, k, None) != v}
        if wrong:
            got = ", ".join(f"{k}={v}" for k, v in wrong.items())
            raise CaseFailed(f"{what}: refused with {got}, expected {expected}") from exc
        return exc
    except NotExecuted as exc:
        raise CaseFailed(f"{what}: raised NotExecuted, expected {expected}") from exc
    except Exception as exc:
        raise CaseFailed(
            f"{what}: raised {type(exc).__name__} ({exc}), expected {expected}"
        ) from exc
    raise CaseFailed(f"{what}: admitted, expected {expected}")


def _describe(kind: type[BaseException], fields: dict[str, object]) -> str:
    inner = ", ".join(f"{k}={v}" for k, v in fields.items())
    return f"{kind.__name__}({inner})" if inner else kind.__name__


# --- requests ------------------------------------------------------------------------------


def start(
    store: StateStore,
    key: str | None,
    action_id: str,
    *,
    lease: timedelta = timedelta(minutes=5),
    approval_id: str | None = None,
    action_hash: str | None = None,
    max_attempts: int | None = None,
    execute: bool = True,
) -> Started:
    """``start_action`` for ``action_id`` on ``key``."""
    return store.start_action(
        StartRequest(
            action_id=action_id,
            effect_key=key,
            lease=lease,
            approval_id=approval_id,
            action_hash=action_hash,
            max_attempts=max_attempts,
            execute=execute,
        )
    )


def receipt_for(action_id: str, result: str, key: str | None, **extra: Any) -> dict[str, Any]:
    """A minimal receipt document (the store chains whatever canonical mapping it is given)."""
    return {
        "receipt_id": f"rcp-{action_id}-{result}",
        "action_id": action_id,
        "result": result,
        "effect_key": key,
        **extra,
    }


def finish(
    store: StateStore,
    key: str,
    action_id: str,
    attempt: int,
    outcome: EffectState,
    **receipt_extra: Any,
) -> Receipt:
    """``finish_action`` recording ``outcome`` for this attempt, with a receipt."""
    return store.finish_action(
        FinishRequest(
            action_id=action_id,
            receipt=receipt_for(action_id, str(outcome), key, attempt=attempt, **receipt_extra),
            effect_key=key,
            attempt=attempt,
            outcome=outcome,
            result={"ok": True} if outcome is EffectState.COMMITTED else None,
            error=None if outcome is EffectState.COMMITTED else f"conformance: {outcome}",
            events=(EventDraft(EventType.EXECUTION_COMMITTED, action_id, key),)
            if outcome is EffectState.COMMITTED
            else (),
        )
    )


def settle(store: StateStore, key: str, action_id: str, outcome: EffectState) -> None:
    """Reserve ``key`` for ``action_id`` and record ``outcome`` (attempt read from the grant)."""
    started = start(store, key, action_id)
    assert started.reservation is not None
    finish(store, key, action_id, started.reservation.attempt, outcome)


def granted_approval(
    store: StateStore, approval_id: str, action_hash: str = HASH_A, ttl: timedelta | None = None
) -> ApprovalRecord:
    """A request for ``action_hash`` recorded and granted by ``APPROVER``."""
    draft = ApprovalRequestDraft(
        approval_id=approval_id,
        action={"action_id": f"act-{approval_id}", "name": "conformance.approve"},
        action_hash=action_hash,
        policy_hash="sha256:" + "00" * 32,
        ttl=ttl or timedelta(minutes=15),
    )
    store.put_approval_request(draft)
    return store.grant_approval(approval_id, APPROVER)


def state_of(store: StateStore, key: str) -> str:
    """The record's state as text, or ``absent``."""
    record = store.get_effect(key)
    return "absent" if record is None else str(record.state)


# --- honesty of a declared N/A -------------------------------------------------------------


def _shares_storage(first: StateStore, second: StateStore, marker: str) -> bool:
    first.record((EventDraft(EventType.ACTION_PROPOSED, marker),), None)
    return any(event.action_id == marker for event in second.events(marker))


def require_url(ctx: CaseContext) -> str:
    """The subprocess address, or ``NotApplicable`` once the claim of having none is checked:
    if a second handle sees a first handle's write, the storage is shared and the backend's
    "no address" is false, which fails the case."""
    url = ctx.scratch.url()
    if url is not None:
        return url
    first, second = ctx.scratch.open(), ctx.scratch.reopen()
    if second is not None and _shares_storage(first, second, ctx.action("honesty-url")):
        raise CaseFailed(
            "dishonest N/A: the backend declares no subprocess address, yet a second handle"
            " sees what the first wrote, so the storage is shared"
        )
    raise NotApplicable("the backend's storage is private to this process (checked)")


def require_reopen(ctx: CaseContext, first: StateStore) -> StateStore:
    """A second independent handle, or ``NotApplicable`` once the claim of having none is
    checked (a fresh ``open`` that sees ``first``'s writes proves the claim false)."""
    second = ctx.scratch.reopen()
    if second is not None:
        return second
    other = ctx.scratch.open()
    if other is not first and _shares_storage(first, other, ctx.action("honesty-reopen")):
        raise CaseFailed(
            "dishonest N/A: the backend declares no second handle, yet another open sees"
            " what the first wrote"
        )
    raise NotApplicable("the backend cannot open a second handle on the same storage (checked)")
