"""``Control``: the one composer of a protected call.

normalize → decide → approve → reserve → execute → record. The policy decides, the store
reserves and records, and ``Control`` only sequences them and maps the executor's outcome:
a return is COMMITTED, ``NotExecuted`` is FAILED, anything else (``BaseException`` included)
is AMBIGUOUS and re-raised. A store exception is never read as "not executed".

The steps (``_begin``: normalize, decide, approve, reserve; the executor; ``_finish``) are
driven by ``run`` here and by ``runtime.aio`` for ``arun``, so both paths share every check.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, NoReturn

from ctrlrun._time import Clock, check_positive, utc_now
from ctrlrun.canonical import new_id
from ctrlrun.display import command_line
from ctrlrun.errors import (
    ActionDenied,
    AlreadyCommitted,
    AmbiguousEffect,
    ApprovalMismatch,
    ApprovalRequired,
    DenyReason,
    DuplicateEffect,
    EffectKeyError,
    InvalidArgument,
    NotExecuted,
    OutcomeUnrecorded,
    Refused,
    StoreError,
)
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.approval import DEFAULT_APPROVAL_TTL, ApprovalRequestDraft
from ctrlrun.kernel.effect import DEFAULT_LEASE, EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.policy import ActionPolicy, Decision, Policy
from ctrlrun.kernel.receipt import Receipt, ReceiptDraft, ReceiptResult
from ctrlrun.kernel.template import Template
from ctrlrun.kernel.text import check_label
from ctrlrun.runtime.context import current_approval, hold, release
from ctrlrun.runtime.normalize import normalized
from ctrlrun.runtime.receipts import Verdict, describe, evaluated, proposed, receipt_draft
from ctrlrun.runtime.reconcile import Reconcile, reconcile_blocked
from ctrlrun.runtime.sinks import Sink, emit
from ctrlrun.store.protocol import FinishRequest, Started, StartRequest, StateStore

log = logging.getLogger("ctrlrun")

DEFAULT_MAX_ARGUMENT_BYTES = 1 << 20  # 1 MiB of canonical arguments per call


@dataclass(frozen=True, slots=True)
class CallSpec:
    """How one call is to be protected, beyond what the policy says."""

    effect_key: str | None = None
    effect: Template | None = None
    lease: timedelta | None = None
    reconcile: Reconcile | None = None
    approval_id: str | None = None


@dataclass(frozen=True, slots=True)
class InFlight:
    """One call in flight: the action, the verdict, its key and the events so far."""

    action: Action
    verdict: Verdict
    effect_key: str | None
    started_at: datetime
    pre: tuple[EventDraft, ...]


class Control:
    """Protects calls against ``policy``, recording in ``store``.

    ``lease`` bounds how long an attempt may hold its effect key before a contender finds it
    lapsed (and AMBIGUOUS); ``clock`` stamps receipts; ``sinks`` receive every receipt after the
    store has it and can never fail an action; ``async_workers`` is how many store threads the
    async path uses; ``max_argument_bytes`` caps one call's canonical arguments (a larger call
    is refused with ``InvalidArgument`` before anything is written).
    """

    def __init__(
        self,
        policy: Policy,
        store: StateStore,
        *,
        lease: timedelta = DEFAULT_LEASE,
        clock: Clock | None = None,
        approval_ttl: timedelta = DEFAULT_APPROVAL_TTL,
        sinks: Sequence[Sink] = (),
        async_workers: int = 8,
        max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
    ) -> None:
        if not isinstance(async_workers, int) or async_workers < 1:
            raise InvalidArgument(f"async_workers must be a positive int, got {async_workers!r}")
        if not isinstance(max_argument_bytes, int) or max_argument_bytes < 1:
            raise InvalidArgument(
                f"max_argument_bytes must be a positive int, got {max_argument_bytes!r}"
            )
        self.max_argument_bytes = max_argument_bytes
        self.policy = policy
        self.store = store
        self.lease = check_positive(lease, "lease")
        self.approval_ttl = check_positive(approval_ttl, "approval_ttl")
        self._clock = clock or utc_now
        self._sinks = tuple(sinks)
        self.async_workers = async_workers
        self._threads: ThreadPoolExecutor | None = None  # the async path's store threads
        self._threads_lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | None = None, **kwargs: Any) -> Control:
        """Policy from ``path``, ``$CTRLRUN_CONFIG`` or ``./ctrlrun.yaml``; store from
        ``$CTRLRUN_STORE_URL`` or ``.ctrlrun/state.db`` beside the policy."""
        from ctrlrun.runtime.locate import open_default_store, policy_path

        found = policy_path(path)
        policy = Policy.from_file(found)
        store = kwargs.pop("store", None) or open_default_store(found)
        return cls(policy, store, **kwargs)

    # --- entry points ---------------------------------------------------------------------

    def execute(
        self,
        action: Action,
        executor: Callable[..., Any],
        *,
        effect_key: str | None = None,
        effect: str | Template | None = None,
        lease: timedelta | None = None,
        reconcile: Reconcile | None = None,
        approval_id: str | None = None,
    ) -> Receipt:
        """Run ``executor(**action.canonical_arguments)`` under every check; return the receipt.

        Raises the refusal (``ActionDenied``, ``ApprovalRequired``, ``ApprovalMismatch``,
        ``DuplicateEffect``, ``AmbiguousEffect``) with the executor never called, or re-raises
        the executor's own exception after recording FAILED (``NotExecuted``) or AMBIGUOUS.
        """
        spec = _spec(effect_key, effect, lease, reconcile, approval_id)
        return self.run(action, executor, spec)[1]

    def run(
        self, action: Action, executor: Callable[..., Any], spec: CallSpec
    ) -> tuple[Any, Receipt]:
        """The pipeline; returns the executor's value and the receipt. ``executor`` must be a
        plain function: one that returns an awaitable is refused (use ``arun``)."""
        call, started = self._begin(action, spec)
        return self._execute(call, executor, started)

    async def aexecute(
        self,
        action: Action,
        executor: Callable[..., Any],
        *,
        effect_key: str | None = None,
        effect: str | Template | None = None,
        lease: timedelta | None = None,
        reconcile: Callable[..., Any] | None = None,
        approval_id: str | None = None,
    ) -> Receipt:
        """``execute`` for async code: the same checks and outcomes; ``executor`` may be an
        ``async def`` (awaited on the loop) or a plain function (run on a worker thread)."""
        spec = _spec(effect_key, effect, lease, reconcile, approval_id)
        return (await self.arun(action, executor, spec))[1]

    async def arun(
        self, action: Action, executor: Callable[..., Any], spec: CallSpec
    ) -> tuple[Any, Receipt]:
        """``run`` for async code. Store work runs on worker threads behind this Control's own
        limiter (``async_workers``); the outcome is recorded even when the call is cancelled,
        and the cancellation then propagates. See ``runtime.aio``."""
        from ctrlrun.runtime.aio import run_async

        return await run_async(self, action, executor, spec)

    def _check_size(self, action: Action) -> None:
        """``InvalidArgument`` before any write if the canonical arguments are over the limit
        (a UTF-8 character is at most 4 bytes: most calls never encode to know)."""
        text = action.arguments_text
        if len(text) * 4 > self.max_argument_bytes:
            size = len(text.encode("utf-8"))
            if size > self.max_argument_bytes:
                raise InvalidArgument(
                    f"{action.name}: {size} bytes of canonical arguments exceed the limit of"
                    f" {self.max_argument_bytes} (Control(max_argument_bytes=...))",
                    size=size,
                    limit=self.max_argument_bytes,
                )

    def _store_threads(self) -> ThreadPoolExecutor:
        """The async path's own store threads (``async_workers`` of them), made at first use;
        each holds its own store connection."""
        with self._threads_lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.async_workers, "ctrlrun-store")
            return self._threads

    # --- normalize and decide -------------------------------------------------------------

    def _begin(self, action: Action, spec: CallSpec) -> tuple[InFlight, Started]:
        """Every step before the executor: normalize, decide, ask for approval, reserve (the
        first transaction). Raises the refusal, recorded with its receipt."""
        self._check_size(action)
        action = normalized(self.policy, action)
        started_at = self._clock()
        entry = self.policy.entry(action.name)
        key = self._effect_key(action, entry, spec, started_at)
        evaluation = self.policy.evaluate(action)
        verdict = Verdict(
            str(evaluation.decision),
            evaluation.label,
            self.policy.policy_hash,
            evaluation.controls,
        )
        call = InFlight(
            action, verdict, key, started_at, (proposed(action), evaluated(action, verdict, key))
        )
        if evaluation.decision is Decision.DENY:
            denied = ActionDenied(
                f"{action.name}: denied ({evaluation.label})",
                reason=evaluation.deny_reason or DenyReason.POLICY,
                action_id=action.action_id,
                rule=evaluation.rule,
            )
            self._refuse(call, denied, ReceiptResult.DENIED, _denied_event(call, denied))
        approval_id = None
        if evaluation.decision is Decision.APPROVE:
            approval_id = spec.approval_id or current_approval()
            if approval_id is None:
                self._request_approval(call)
        return call, self._start(call, approval_id, entry, spec)

    def _effect_key(
        self, action: Action, entry: ActionPolicy | None, spec: CallSpec, now: datetime
    ) -> str | None:
        if spec.effect_key is not None:
            return check_label(spec.effect_key, "effect_key")
        template = spec.effect or (entry.effect if entry is not None else None)
        if template is None:
            return None
        try:
            key = template.render(action.plain_arguments, action.resource)  # reads only
            return check_label(key, "effect key")  # bad input: refused before any write
        except EffectKeyError as exc:
            exc.action_id = action.action_id
            cited = entry.controls if entry is not None else ()
            verdict = Verdict("deny", "effect_key_error", self.policy.policy_hash, cited)
            call = InFlight(action, verdict, None, now, (proposed(action),))
            self._refuse(call, exc, ReceiptResult.DENIED, _denied_event(call, exc))

    def _request_approval(self, call: InFlight) -> NoReturn:
        draft = ApprovalRequestDraft(
            approval_id=new_id("apr"),
            action=call.action.to_dict(),
            action_hash=call.action.action_hash,
            policy_hash=call.verdict.policy_hash,
            ttl=self.approval_ttl,
        )
        self.store.put_approval_request(draft, call.pre)
        raise ApprovalRequired(
            f"{call.action.name} needs a human:"
            f" `{command_line('ctrlrun', 'approve', draft.approval_id)}`, then call again"
            " inside with_approval(...)",
            request_id=draft.approval_id,
            action_id=call.action.action_id,
        )

    # --- reserve --------------------------------------------------------------------------

    def _start(
        self, call: InFlight, approval_id: str | None, entry: ActionPolicy | None, spec: CallSpec
    ) -> Started:
        request = StartRequest(
            action_id=call.action.action_id,
            effect_key=call.effect_key,
            lease=spec.lease or self.lease,
            approval_id=approval_id,
            action_hash=call.action.action_hash,
            max_attempts=entry.max_attempts if entry is not None else None,
            events=call.pre,
        )
        try:
            return self.store.start_action(request)
        except AmbiguousEffect as exc:
            if spec.reconcile is None or call.effect_key is None:
                self._refuse_start(call, exc)
            reconciled = reconcile_blocked(self.store, call.action, call.effect_key, spec.reconcile)
            if reconciled.unwritten:  # they go with this call's next transaction
                call = replace(call, pre=(*call.pre, *reconciled.unwritten))
                request = replace(request, events=call.pre)
            if not reconciled.retry:
                self._refuse_start(call, exc)
        except Refused as exc:
            self._refuse_start(call, exc)
        try:
            return self.store.start_action(request)
        except Refused as exc:
            self._refuse_start(call, exc)

    def _refuse_start(self, call: InFlight, exc: Refused) -> NoReturn:
        result = ReceiptResult.BLOCKED
        approval_id = None
        if isinstance(exc, ApprovalMismatch):
            kind, data = EventType.APPROVAL_INVALIDATED, {"reason": str(exc.reason)}
            approval_id = exc.approval_id  # which approval was refused, for `ctrlrun inspect`
        elif isinstance(exc, ActionDenied) and exc.reason is DenyReason.APPROVAL_DENIED:
            self._refuse(call, exc, ReceiptResult.DENIED, _denied_event(call, exc))
        else:
            if isinstance(exc, AlreadyCommitted) and exc.receipt_id is None:
                exc.receipt_id = self._committed_receipt(exc.effect_key)
            kind, data = EventType.EFFECT_RESERVATION_REFUSED, {"reason": str(exc.reason)}
            if isinstance(exc, DuplicateEffect):
                data["state"] = str(exc.state)
        event = EventDraft(kind, call.action.action_id, call.effect_key, approval_id, data)
        self._refuse(call, exc, result, event)

    def _committed_receipt(self, effect_key: str) -> str | None:
        """The receipt of the attempt that committed ``effect_key`` (a read on the refusal path
        only), so an idempotent replay can point at it."""
        record = self.store.get_effect(effect_key)
        if record is None:
            return None
        for receipt in reversed(self.store.receipts(record.action_id)):
            document = receipt.document
            if document.get("effect_key") == effect_key and document.get("result") == "committed":
                return receipt.receipt_id
        return None

    def _refuse(
        self, call: InFlight, exc: Refused, result: ReceiptResult, event: EventDraft
    ) -> NoReturn:
        """Record the refusal (events + receipt, one transaction), then raise it."""
        now = self._clock()
        draft = receipt_draft(
            call.action,
            call.verdict,
            result,
            started_at=call.started_at,
            finished_at=now,
            effect_key=call.effect_key,
            error=describe(exc),
        )
        receipt = self.store.record((*call.pre, event), draft)
        assert receipt is not None
        emit(self._sinks, receipt)
        raise exc

    # --- execute and record ---------------------------------------------------------------

    def _execute(
        self, call: InFlight, executor: Callable[..., Any], started: Started
    ) -> tuple[Any, Receipt]:
        reservation = started.reservation
        attempt = reservation.attempt if reservation is not None else None
        try:
            token = hold(call.effect_key, attempt)
            try:
                value = executor(**call.action.canonical_arguments)
            finally:
                release(token)
        except NotExecuted as exc:
            self._finish(call, started, EffectState.FAILED, None, exc)
            raise
        except BaseException as exc:
            self._finish(call, started, EffectState.AMBIGUOUS, None, exc)
            raise
        if inspect.isawaitable(value):
            self._refuse_awaitable(call, started, value)
        return value, self._finish(call, started, EffectState.COMMITTED, value, None)

    def _refuse_awaitable(
        self, call: InFlight, started: Started, value: Awaitable[Any]
    ) -> NoReturn:
        """A sync call got an awaitable back: the work has not happened (a coroutine never
        started, closed here: FAILED) or is running unobserved (anything else: AMBIGUOUS).
        Never COMMITTED: that would spend the key on work nobody awaited."""
        error = InvalidArgument(
            f"{call.action.name}: the executor returned an awaitable; protect an async function"
            " with an async caller (await it, or use Control.arun)"
        )
        if inspect.iscoroutine(value):
            value.close()
            self._finish(call, started, EffectState.FAILED, None, error)
        else:
            self._finish(call, started, EffectState.AMBIGUOUS, None, error)
        raise error

    def _finish(
        self,
        call: InFlight,
        started: Started,
        outcome: EffectState,
        value: Any,
        exc: BaseException | None,
    ) -> Receipt:
        attempt = started.reservation.attempt if started.reservation is not None else None
        error = describe(exc) if exc is not None else None
        draft = self._draft(call, started, _OUTCOME_RESULTS[outcome], error, attempt)
        data = {"attempt": attempt} if error is None else {"attempt": attempt, "error": error}
        event = EventDraft(
            _OUTCOME_EVENTS[outcome], call.action.action_id, call.effect_key, data=data
        )
        request = FinishRequest(
            action_id=call.action.action_id,
            receipt=draft,
            effect_key=call.effect_key,
            attempt=attempt,
            outcome=outcome if call.effect_key else None,
            result=value,
            error=error,
            events=(event,),
        )
        try:
            try:
                receipt = self.store.finish_action(request)
            except Refused as refusal:
                receipt = self._outcome_refused(
                    call,
                    started=started,
                    outcome=outcome,
                    error=error,
                    refusal=refusal,
                    attempt=attempt,
                )
                if outcome is not EffectState.AMBIGUOUS:
                    emit(self._sinks, receipt)
                    raise refusal from exc
        except StoreError as failure:  # after the executor ran: never "nothing happened"
            raise _unrecorded(call, outcome, failure) from failure
        emit(self._sinks, receipt)
        return receipt

    def _outcome_refused(
        self,
        call: InFlight,
        *,
        started: Started,
        outcome: EffectState,
        error: str | None,
        refusal: Refused,
        attempt: int | None,
    ) -> Receipt:
        """The store would not take the outcome (the lease lapsed and a contender, or a human,
        moved the record): what happened is unknown to the store, so the receipt says
        AMBIGUOUS and names both the outcome and the refusal."""
        log.warning(
            "ctrlrun: %s outcome %s for %s was refused by the store: %s",
            call.action.name,
            outcome,
            call.effect_key,
            refusal,
        )
        detail = f"outcome {outcome} not recorded: {describe(refusal)}"
        if error is not None:
            detail = f"{error}; {detail}"
        draft = self._draft(call, started, ReceiptResult.AMBIGUOUS, detail, attempt)
        event = EventDraft(
            EventType.EXECUTION_AMBIGUOUS,
            call.action.action_id,
            call.effect_key,
            data={"attempt": attempt, "intended": str(outcome), "error": detail},
        )
        stored = self.store.record((event,), draft)
        assert stored is not None
        return stored

    def _draft(
        self,
        call: InFlight,
        started: Started,
        result: ReceiptResult,
        error: str | None,
        attempt: int | None,
    ) -> ReceiptDraft:
        approval = started.approval
        return receipt_draft(
            call.action,
            call.verdict,
            result,
            started_at=call.started_at,
            finished_at=self._clock(),
            effect_key=call.effect_key,
            attempt=attempt,
            approval_id=approval.approval_id if approval else None,
            approver=approval.approver if approval else None,
            error=error,
        )


_OUTCOME_EVENTS = {
    EffectState.COMMITTED: EventType.EXECUTION_COMMITTED,
    EffectState.FAILED: EventType.EXECUTION_FAILED,
    EffectState.AMBIGUOUS: EventType.EXECUTION_AMBIGUOUS,
}


_OUTCOME_RESULTS = {state: ReceiptResult(state.value) for state in _OUTCOME_EVENTS}


def _unrecorded(call: InFlight, outcome: EffectState, failure: StoreError) -> OutcomeUnrecorded:
    key = call.effect_key
    held = (
        f"; {key!r} stays held and becomes AMBIGUOUS when its lease expires"
        if key is not None
        else ""
    )
    log.error(
        "ctrlrun: %s ran but its outcome %s was not recorded: %s",
        call.action.name,
        outcome,
        failure,
    )
    return OutcomeUnrecorded(
        f"{call.action.name}: the executor ran, but its outcome ({outcome}) could not be"
        f" recorded: {describe(failure)}{held}",
        effect_key=key,
        intended=str(outcome),
    )


def _denied_event(call: InFlight, exc: ActionDenied) -> EventDraft:
    return EventDraft(
        EventType.ACTION_DENIED,
        call.action.action_id,
        call.effect_key,
        data={"reason": str(exc.reason), "rule": exc.rule},
    )


def _spec(
    effect_key: str | None,
    effect: str | Template | None,
    lease: timedelta | None,
    reconcile: Callable[..., Any] | None,
    approval_id: str | None,
) -> CallSpec:
    if effect_key is not None:
        check_label(effect_key, "effect_key")
    template = Template.parse(effect) if isinstance(effect, str) else effect
    if lease is not None:
        check_positive(lease, "lease")
    return CallSpec(effect_key, template, lease, reconcile, approval_id)
