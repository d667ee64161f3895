"""``Control``: the one composer of a protected call.

normalize → decide → approve → reserve → execute → record. The policy decides, the store
reserves and records, and ``Control`` only sequences them and maps the executor's outcome:
a return is COMMITTED, ``NotExecuted`` is FAILED, anything else (``BaseException`` included)
is AMBIGUOUS and re-raised. A store exception is never read as "not executed".

The steps (``_begin``: normalize, decide, approve, reserve; the executor; ``_finish``) are
driven by ``run`` here and by ``runtime.aio`` for ``arun``, so both paths share every check.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, NoReturn

from ctrlrun._time import Clock, check_positive, utc_now
from ctrlrun.canonical import new_id
from ctrlrun.errors import (
    ActionDenied,
    AlreadyCommitted,
    AmbiguousEffect,
    ApprovalMismatch,
    DenyReason,
    EffectKeyError,
    EffectTemplateChanged,
    InvalidArgument,
    MismatchReason,
    NotExecuted,
    PolicyError,
    ProtectionMismatch,
    Refused,
    StoreError,
)
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.approval import (
    DEFAULT_APPROVAL_TTL,
    ApprovalRecord,
    ApprovalRequestDraft,
    plan_reuse,
    requesters,
)
from ctrlrun.kernel.approval_rules import DEFAULT_RULES, ApprovalRules
from ctrlrun.kernel.call import refusal_before_asking
from ctrlrun.kernel.effect import DEFAULT_LEASE, EffectState
from ctrlrun.kernel.event import EventDraft
from ctrlrun.kernel.notify import NotifyKind, told_of
from ctrlrun.kernel.policy import ActionPolicy, Decision, Policy
from ctrlrun.kernel.protection import FindingKind, plan_protection
from ctrlrun.kernel.receipt import Receipt, ReceiptResult
from ctrlrun.kernel.request_check import tampering
from ctrlrun.kernel.template import Template
from ctrlrun.kernel.text import check_label
from ctrlrun.runtime.answering import tampered_event
from ctrlrun.runtime.approvals import Approvals
from ctrlrun.runtime.assess import Assessment, assess
from ctrlrun.runtime.budget import DENIED_AT_START, budget_charge, past_limit, request_charge
from ctrlrun.runtime.call import (
    CallSpec,
    InFlight,
    approval_required,
    check_size,
    committed_receipt,
    denied_event,
    finish_request,
    make_spec,
    outcome_refused_draft,
    refused_event,
    summarize,
    template_source,
    unrecorded,
)
from ctrlrun.runtime.context import current_approval, hold, release
from ctrlrun.runtime.normalize import build_action, normalized
from ctrlrun.runtime.observe import NOT_STARTED, begin_observed
from ctrlrun.runtime.policy_source import PolicySource
from ctrlrun.runtime.receipts import Verdict, describe, evaluated, proposed, receipt_draft
from ctrlrun.runtime.reconcile import Reconcile, reconcile_blocked
from ctrlrun.runtime.sinks import Sink, emit, emit_approval
from ctrlrun.runtime.tracing import CallTracer, traced
from ctrlrun.store.protocol import Started, StartRequest, StateStore

log = logging.getLogger("ctrlrun")

DEFAULT_MAX_ARGUMENT_BYTES = 1 << 20  # 1 MiB of canonical arguments per call


class Control:
    """Protects calls against ``policy``, recording in ``store``.

    ``lease`` bounds how long an attempt may hold its effect key before a contender finds it
    lapsed (and AMBIGUOUS); ``clock`` stamps receipts; ``sinks`` receive every receipt after the
    store has it and can never fail an action; ``async_workers`` is how many store threads the
    async path uses; ``max_argument_bytes`` caps one call's canonical arguments (a larger call
    is refused with ``InvalidArgument`` before anything is written); ``tracer`` sees each call
    whole (``runtime.tracing``; ``ctrlrun.integrations.otel`` for OpenTelemetry).
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
        tracer: CallTracer | None = None,
    ) -> None:
        if not isinstance(async_workers, int) or async_workers < 1:
            raise InvalidArgument(f"async_workers must be a positive int, got {async_workers!r}")
        if not isinstance(max_argument_bytes, int) or max_argument_bytes < 1:
            raise InvalidArgument(
                f"max_argument_bytes must be a positive int, got {max_argument_bytes!r}"
            )
        self.max_argument_bytes = max_argument_bytes
        self.policy = policy
        self._source: PolicySource | None = None  # set by from_file: re-read on change
        self._fits: dict[tuple[object, ...], tuple[str, ...]] = {}  # check_protection's verdicts
        self.store = store
        self.lease = check_positive(lease, "lease")
        self.approval_ttl = check_positive(approval_ttl, "approval_ttl")
        self._clock = clock or utc_now
        self.tracer = tracer
        self._sinks = (*sinks, tracer) if isinstance(tracer, Sink) else tuple(sinks)
        self.async_workers = async_workers
        self._threads: ThreadPoolExecutor | None = None  # the async path's store threads
        self._threads_lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | None = None, *, create: bool = False, **kwargs: Any) -> Control:
        """Policy from ``path``, ``$CTRLRUN_CONFIG`` or ``./ctrlrun.yaml``; store from
        ``$CTRLRUN_STORE_URL`` or ``.ctrlrun/state.db`` beside the policy. The store must
        exist (``ctrlrun init`` creates it) unless ``create=True``: a missing or empty one is
        ``StoreNotFound``, never silently recreated."""
        from ctrlrun.config import load_policy_file  # YAML loads with the first policy file
        from ctrlrun.runtime.locate import missing_policy_text, open_default_store, policy_path

        found = policy_path(path)
        if not found.exists() and not found.is_symlink():
            raise PolicyError(missing_policy_text(found), path=str(found))
        policy = load_policy_file(found)
        store = kwargs.pop("store", None) or open_default_store(found, create=create)
        control = cls(policy, store, **kwargs)
        control._source = PolicySource(found, policy)
        return control

    def refresh_policy(self) -> Policy:
        """The policy to decide with now. A ``Control`` made by ``from_file`` re-reads its
        file when it changed (one ``stat`` per call); a file that no longer loads denies
        every call with ``DenyReason.POLICY_UNLOADABLE`` until it loads again."""
        source = self._source
        if source is None:
            return self.policy
        self.policy = source.refresh()
        if source.error is not None:
            raise ActionDenied(
                f"the policy {source.path} does not load, so every call is denied until it"
                f" is fixed: {source.error}",
                reason=DenyReason.POLICY_UNLOADABLE,
            )
        return self.policy

    # --- entry points ---------------------------------------------------------------------

    @functools.cached_property
    def approvals(self) -> Approvals:
        """The approval requests of this store, answered under this policy."""
        return Approvals(self)

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The sinks every receipt (and approval step) is handed to."""
        return self._sinks

    def now(self) -> datetime:
        """This ``Control``'s clock (receipts and approval expiry are judged by it)."""
        return self._clock()

    def build(self, name: str, arguments: dict[str, Any], principal: Principal) -> Action:
        """The action a protected function ``name`` would make of ``arguments`` for
        ``principal`` under the current policy (its resource template applied)."""
        return build_action(self.refresh_policy(), name, dict(arguments), principal)

    def evaluate(self, name: str, arguments: dict[str, Any], principal: Principal) -> Assessment:
        """What would happen to this call now, writing nothing: the decision and its rule,
        the effect key and its state, and the approval that decides it (``Assessment``);
        ``ApprovalMismatch`` (``tampered``) if that request's stored action was rewritten."""
        policy = self.refresh_policy()
        return assess(self, build_action(policy, name, dict(arguments), principal), policy)

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
        spec = make_spec(effect_key, effect, lease, reconcile, approval_id)
        return self.run(action, executor, spec)[1]

    def run(
        self,
        action: Action,
        executor: Callable[..., Any],
        spec: CallSpec,
        *,
        policy: Policy | None = None,
    ) -> tuple[Any, Receipt]:
        """The pipeline; returns the executor's value and the receipt. ``executor`` must be a
        plain function: one that returns an awaitable is refused (use ``arun``). ``policy``
        is the one the action was built under (``protect`` passes its own): one policy
        decides the whole call; by default it is ``refresh_policy()`` now."""
        with traced(self.tracer, action):
            call, started = self._begin(action, spec, policy)
            return self._execute(call, executor, started)

    async def aexecute(
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
        """``execute`` for async code: the same checks and outcomes; ``executor`` may be an
        ``async def`` (awaited on the loop) or a plain function (run on a worker thread)."""
        spec = make_spec(effect_key, effect, lease, reconcile, approval_id)
        return (await self.arun(action, executor, spec))[1]

    async def arun(
        self,
        action: Action,
        executor: Callable[..., Any],
        spec: CallSpec,
        *,
        policy: Policy | None = None,
    ) -> tuple[Any, Receipt]:
        """``run`` for async code. Store work runs on worker threads behind this Control's own
        limiter (``async_workers``); the outcome is recorded even when the call is cancelled,
        and the cancellation then propagates. See ``runtime.aio``."""
        from ctrlrun.runtime.aio import run_async

        with traced(self.tracer, action):
            return await run_async(self, action, executor, spec, policy)

    def check_protection(
        self,
        name: str,
        parameters: frozenset[str],
        *,
        effect: Template | None = None,
        resource: Template | None = None,
        policy: Policy | None = None,
    ) -> None:
        """``ProtectionMismatch`` (with every finding) if ``policy`` (by default the current
        one) names arguments that a function protected as ``name`` with ``parameters`` (and
        its own ``effect`` and ``resource`` templates) lacks. Decided once per policy and
        function shape."""
        if policy is None:
            policy = self.policy
        key = (policy.policy_hash, name, parameters, effect, resource)
        misfits = self._fits.get(key)
        if misfits is None:
            found = plan_protection(policy, name, parameters, effect=effect, resource=resource)
            misfits = tuple(str(f) for f in found if f.kind is FindingKind.MISSING_PARAMETER)
            self._fits[key] = misfits
        if misfits:
            raise ProtectionMismatch(
                f"{name}: the protected function does not fit the policy: {'; '.join(misfits)}"
                " (run `ctrlrun check` on its module)",
                findings=misfits,
            )

    def _store_threads(self) -> ThreadPoolExecutor:
        """The async path's own store threads (``async_workers`` of them), made at first use;
        each holds its own store connection."""
        with self._threads_lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.async_workers, "ctrlrun-store")
            return self._threads

    # --- normalize and decide -------------------------------------------------------------

    def _begin(
        self, action: Action, spec: CallSpec, policy: Policy | None = None
    ) -> tuple[InFlight, Started]:
        """Every step before the executor: normalize, decide, ask for approval, reserve (the
        first transaction), all under one policy (a file re-read by another thread meanwhile
        applies from the next call). Raises the refusal, recorded with its receipt."""
        check_size(action, self.max_argument_bytes)
        if policy is None:
            policy = self.refresh_policy()
        action = normalized(policy, action)
        started_at = self._clock()
        if policy.observes(action.name):  # mode: observe: nothing enforced, nothing reserved
            return begin_observed(self, action, spec, policy, started_at), NOT_STARTED
        entry = policy.entry(action.name)
        key = self._effect_key(action, policy, entry, spec, started_at)
        evaluation = policy.evaluate(action)
        verdict = Verdict(
            str(evaluation.decision), evaluation.label, policy.policy_hash, evaluation.controls
        )
        pre = (proposed(action), evaluated(action, verdict, key))
        rules = entry.approval_for(evaluation.rule) if entry is not None else DEFAULT_RULES
        call = InFlight(action, verdict, key, started_at, pre, policy, rules)
        if evaluation.decision is Decision.DENY:
            denied = ActionDenied(
                f"{action.name}: denied ({evaluation.label})",
                reason=evaluation.deny_reason or DenyReason.POLICY,
                action_id=action.action_id,
                rule=evaluation.rule,
            )
            self._refuse(call, denied, ReceiptResult.DENIED, denied_event(call, denied))
        approval_id = None
        if evaluation.decision is Decision.APPROVE:
            approval_id = self._approval_for(call, entry, spec)
        return call, self._start(call, approval_id, entry, spec)

    def _effect_key(
        self,
        action: Action,
        policy: Policy,
        entry: ActionPolicy | None,
        spec: CallSpec,
        now: datetime,
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
            verdict = Verdict("deny", "effect_key_error", policy.policy_hash, cited)
            call = InFlight(action, verdict, None, now, (proposed(action),), policy)
            self._refuse(call, exc, ReceiptResult.DENIED, denied_event(call, exc))

    def _approval_for(self, call: InFlight, entry: ActionPolicy | None, spec: CallSpec) -> str:
        """The approval this call presents: the one given, else an unexpired grant made for
        the identical action (consumed by the first transaction). Otherwise it is refused:
        denied if a person denied exactly this call (until that answer expires), else
        ``ApprovalRequired`` for a pending request (the existing one, if any)."""
        presented = spec.approval_id or current_approval()
        if presented is not None:
            return presented
        found = self.store.find_approvals(call.action.action_hash, call.verdict.policy_hash)
        reuse = plan_reuse(found, now=self._clock())
        if reuse.granted is not None:
            return reuse.granted.approval_id
        self._refuse_before_asking(call, spec)
        if reuse.denied is not None:
            denied_id = reuse.denied.approval_id
            why = self.store.denial_reason(denied_id)
            denied = ActionDenied(
                f"{call.action.name}: a person denied exactly this call"
                f" ({denied_id}, by {reuse.denied.approver})" + (f": {why}" if why else ""),
                reason=DenyReason.APPROVAL_DENIED,
                action_id=call.action.action_id,
                approver_reason=why,
            )
            self._refuse(call, denied, ReceiptResult.DENIED, denied_event(call, denied))
        raise approval_required(call, self._ask(call, call.approval))

    def _refuse_before_asking(self, call: InFlight, spec: CallSpec) -> None:
        """Nobody is asked about a key that committed, is in progress or is AMBIGUOUS: the
        call is refused as its reservation would be (recorded, one transaction), with no
        request, notification or inbox entry. The read is the one ``evaluate`` makes."""
        if call.effect_key is None:
            return
        record = self.store.get_effect(call.effect_key)
        refusal = refusal_before_asking(
            record, now=self._clock(), reconcilable=spec.reconcile is not None
        )
        if refusal is not None:
            self._refuse_start(call, refusal)

    def request_approval(self, action: Action) -> ApprovalRecord:
        """The pending request for exactly ``action`` (made now, or the one already waiting),
        without running anything: for a framework that pauses before it calls the tool.
        ``InvalidArgument`` if the policy does not say ``approve`` for it; the refusal the call
        would get (``AlreadyCommitted`` with the stored result, ``InProgress``,
        ``AmbiguousEffect``), with nothing written, if its effect key already committed, is
        held or is AMBIGUOUS: nobody is asked about what already ran."""
        policy = self.refresh_policy()
        action = normalized(policy, action)
        evaluation = policy.evaluate(action)
        if evaluation.decision is not Decision.APPROVE:
            raise InvalidArgument(
                f"{action.name}: the policy says {evaluation.decision}, not approve"
            )
        refusal = assess(self, action, policy).refusal
        if refusal is not None:
            raise refusal
        verdict = Verdict("approve", evaluation.label, policy.policy_hash, evaluation.controls)
        pre = (proposed(action), evaluated(action, verdict, None))
        entry = policy.entry(action.name)
        rules = entry.approval_for(evaluation.rule) if entry is not None else DEFAULT_RULES
        call = InFlight(action, verdict, None, self._clock(), pre, policy, rules)
        return self._ask(call, call.approval)

    def _ask(self, call: InFlight, rules: ApprovalRules) -> ApprovalRecord:
        action = call.action.to_dict()
        draft = ApprovalRequestDraft(
            approval_id=new_id("apr"),
            action=action,
            action_hash=call.action.action_hash,
            policy_hash=call.verdict.policy_hash,
            ttl=rules.ttl or self.approval_ttl,
            required=rules.count,
            excluded=requesters(action) if rules.distinct_from_requester else (),
            notify=call.policy.notify,
            summary=summarize(call.action),
            budget=request_charge(call.action, call.policy.entry(call.action.name)),
        )
        record = self.store.put_approval_request(draft, call.pre)
        if record.approval_id == draft.approval_id:  # a new request, not the pending one
            emit_approval(self._sinks, "requested", record)
            return record
        tampered = tampering(record)  # the waiting one, as stored: is it still this action?
        if tampered is not None:  # its events went with the request's transaction
            event = replace(tampered_event(record), action_id=call.action.action_id)
            self._refuse(replace(call, pre=()), tampered, ReceiptResult.BLOCKED, event)
        return record

    # --- reserve --------------------------------------------------------------------------

    def _start(
        self, call: InFlight, approval_id: str | None, entry: ActionPolicy | None, spec: CallSpec
    ) -> Started:
        rules = call.approval
        excluded = requesters(call.action.to_dict()) if rules.distinct_from_requester else ()
        request = StartRequest(
            action_id=call.action.action_id,
            effect_key=call.effect_key,
            lease=spec.lease or self.lease,
            approval_id=approval_id,
            action_hash=call.action.action_hash,
            policy_hash=call.verdict.policy_hash if approval_id is not None else None,
            approvals_required=rules.count,
            approvers_excluded=excluded,
            approver_keys=call.policy.approvers or None,
            announce_ambiguous=told_of(call.policy.notify, NotifyKind.AMBIGUOUS),
            max_attempts=entry.max_attempts if entry is not None else None,
            events=call.pre,
            action_name=call.action.name,
            effect_template=template_source(call, entry, spec),
            budget=budget_charge(
                call.action, entry, lambda e: self._refuse_start(call, e), approval_id
            ),
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
        except Refused as exc:  # past an over: approve budget's limit, a person decides
            request = past_limit(self, call, entry, spec, request, exc)
        try:
            return self.store.start_action(request)
        except Refused as exc:
            self._refuse_start(call, exc)

    def _refuse_start(self, call: InFlight, exc: Refused) -> NoReturn:
        if isinstance(exc, ActionDenied) and exc.reason in DENIED_AT_START:
            self._refuse(call, exc, ReceiptResult.DENIED, denied_event(call, exc))
        if isinstance(exc, ApprovalMismatch) and exc.reason is MismatchReason.EXPIRED:
            self._emit_expired(exc.approval_id)
        if isinstance(exc, AlreadyCommitted) and exc.receipt_id is None:
            exc.receipt_id = committed_receipt(self.store, exc.effect_key)
        if isinstance(exc, EffectTemplateChanged):
            exc.action_id = call.action.action_id
        self._refuse(call, exc, ReceiptResult.BLOCKED, refused_event(call, exc))

    def _emit_expired(self, approval_id: str | None) -> None:
        record = self.store.get_approval(approval_id) if approval_id and self._sinks else None
        if record is not None:
            emit_approval(self._sinks, "expired", record)

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
        error = describe(exc) if exc is not None else None
        request = finish_request(call, started, outcome, value, error, now=self._clock())
        try:
            try:
                receipt = self.store.finish_action(request)
            except Refused as refusal:
                kept = outcome_refused_draft(
                    call, started, outcome, error, refusal, now=self._clock()
                )
                stored = self.store.record((kept.event,), kept.receipt)
                assert stored is not None
                receipt = stored
                if outcome is not EffectState.AMBIGUOUS:
                    emit(self._sinks, receipt)
                    raise refusal from exc
        except StoreError as failure:  # after the executor ran: never "nothing happened"
            raise unrecorded(call, outcome, failure) from failure
        emit(self._sinks, receipt)
        return receipt
