"""One protected call, start to end, as one straight line (decision 0030).

``begin`` (size, policy, normalize, decide, ask, reserve: the first transaction) → the
executor → ``finish`` (the second transaction and the receipt). One mutable ``InFlight`` carries
the call's state from step to step, so no step hands its parts back to ``Control`` to pass on:
``Control.run`` calls ``run`` here once, and ``runtime.aio`` awaits the same ``begin`` and
``finish`` on its store threads with only the executor awaited between them.

The outcome table: a return is COMMITTED, ``NotExecuted`` is FAILED, anything else
(``BaseException`` included) is AMBIGUOUS and re-raised. A store exception is never read as
"not executed". Every refusal is recorded with its receipt (one transaction) and raised.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, NoReturn

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
    Refused,
    StoreError,
)
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalRequestDraft, plan_reuse, requesters
from ctrlrun.kernel.approval_rules import DEFAULT_RULES, ApprovalRules
from ctrlrun.kernel.call import refusal_before_asking
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft
from ctrlrun.kernel.evidence_text import attempt_data
from ctrlrun.kernel.notify import NotifyKind, told_of
from ctrlrun.kernel.observe import Observation
from ctrlrun.kernel.policy import ActionPolicy, Decision, Policy
from ctrlrun.kernel.receipt import Receipt, ReceiptDraft, ReceiptResult
from ctrlrun.kernel.request_check import tampering
from ctrlrun.kernel.text import check_label
from ctrlrun.runtime.answering import tampered_event
from ctrlrun.runtime.budget import (
    DENIED_AT_START,
    approved_start,
    budget_charge,
    needs_a_person,
    request_charge,
)
from ctrlrun.runtime.call import (
    OUTCOME_EVENTS,
    OUTCOME_RESULTS,
    CallSpec,
    ambiguous_notices,
    approval_required,
    committed_receipt,
    denied_event,
    outcome_refused,
    refused_event,
    summarize,
    unrecorded,
)
from ctrlrun.runtime.context import current_approval, hold, release
from ctrlrun.runtime.normalize import normalized
from ctrlrun.runtime.observe import NOT_STARTED, begin_observed, observed_request
from ctrlrun.runtime.receipts import (
    Verdict,
    decided,
    describe,
    evaluated,
    proposed,
    receipt_draft,
)
from ctrlrun.runtime.reconcile import reconcile_blocked
from ctrlrun.runtime.sinks import emit, emit_approval
from ctrlrun.runtime.tracing import traced
from ctrlrun.store.protocol import FinishRequest, Started, StartRequest, StateStore

if TYPE_CHECKING:
    from ctrlrun._time import Clock
    from ctrlrun.runtime.control import Control

# Enum members compared or written on every call, read once: on Python 3.11 each
# ``EnumClass.MEMBER`` read passes through ``EnumType.__getattr__``'s slot, ~850
# instructions (callgrind, 6 December 2026).
_DENY, _APPROVE = Decision.DENY, Decision.APPROVE
_COMMITTED, _FAILED, _AMBIGUOUS = EffectState.COMMITTED, EffectState.FAILED, EffectState.AMBIGUOUS
_TOLD_OF_AMBIGUOUS = NotifyKind.AMBIGUOUS

# Exact types whose values are never awaitable: a sync call's usual results skip
# ``inspect.isawaitable`` (an ABC check, ~2k instructions); a subclass may define
# ``__await__``, so only these exact types.
_NEVER_AWAITABLE: Final = frozenset({type(None), str, int, bool, float, bytes, dict, list, tuple})

UNDECIDED: Final = Verdict("", "", "")
"""An ``InFlight``'s verdict until the policy has decided (never written anywhere)."""


@dataclass(slots=True)
class InFlight:
    """One call in flight, filled in as it goes: the ``Control`` it runs under (its ``store``
    and ``clock`` at hand), the action, how it is protected (``spec``), the one policy that
    decides it and its entry, then the verdict, the effect key, the events the first
    transaction writes (``pre``), the approval rules, what an observed call would have done,
    and what the reservation granted (``started``). Mutable on purpose: each step sets what it
    learnt, and nothing is copied between steps."""

    control: Control
    store: StateStore
    clock: Clock
    action: Action
    spec: CallSpec
    policy: Policy
    entry: ActionPolicy | None
    started_at: datetime
    verdict: Verdict = UNDECIDED
    effect_key: str | None = None
    pre: tuple[EventDraft, ...] = ()
    approval: ApprovalRules = DEFAULT_RULES  # its rule's, else its action's
    observed: Observation | None = None  # mode: observe: what enforcement would have done
    started: Started = NOT_STARTED


def run(
    control: Control,
    action: Action,
    executor: Callable[..., Any],
    spec: CallSpec,
    policy: Policy | None,
) -> tuple[Any, Receipt]:
    """``Control.run``: the whole call; the executor's value and the receipt."""
    if control.tracer is None:
        return execute(begin(control, action, spec, policy), executor)
    with traced(control.tracer, action):
        return execute(begin(control, action, spec, policy), executor)


# --- before the executor ------------------------------------------------------------------


def begin(control: Control, action: Action, spec: CallSpec, policy: Policy | None) -> InFlight:
    """Every step before the executor: size, normalize, decide, ask for approval, reserve (the
    first transaction), all under one policy (by default ``control.refresh_policy()`` now; a
    file re-read by another thread meanwhile applies from the next call). Raises the refusal,
    recorded with its receipt."""
    check_size(action, control.max_argument_bytes)
    if policy is None:
        policy = control.refresh_policy()
    entry = policy.entry(action.name)
    if action.resource is None and entry is not None and entry.resource is not None:
        action = normalized(policy, action)  # a hand-built action gets the policy's resource
    store, clock = control.store, control._clock
    call = InFlight(control, store, clock, action, spec, policy, entry, clock())
    if policy.observes(action.name):  # mode: observe: nothing enforced, nothing reserved
        begin_observed(call)
        return call
    call.effect_key = effect_key(call)
    evaluation = policy.evaluate(action)
    call.verdict = decided(
        str(evaluation.decision), evaluation.label, policy.policy_hash, evaluation.controls
    )
    call.pre = (proposed(action), evaluated(action, call.verdict, call.effect_key))
    if entry is not None:
        call.approval = entry.approval_for(evaluation.rule)
    if evaluation.decision is _DENY:
        denied = ActionDenied(
            f"{action.name}: denied ({evaluation.label})",
            reason=evaluation.deny_reason or DenyReason.POLICY,
            action_id=action.action_id,
            rule=evaluation.rule,
        )
        refuse(call, denied, ReceiptResult.DENIED, denied_event(call, denied))
    approval_id = approval_for(call) if evaluation.decision is _APPROVE else None
    reserve(call, approval_id)
    return call


def check_size(action: Action, limit: int) -> None:
    """``InvalidArgument`` before any write if the canonical arguments are over the limit
    (a UTF-8 character is at most 4 bytes: most calls never encode to know)."""
    text = action.arguments_text
    if len(text) * 4 > limit:
        size = len(text.encode("utf-8"))
        if size > limit:
            raise InvalidArgument(
                f"{action.name}: {size} bytes of canonical arguments exceed the limit of"
                f" {limit} (Control(max_argument_bytes=...))",
                size=size,
                limit=limit,
            )


def effect_key(call: InFlight) -> str | None:
    """The key ``call`` reserves: the one given, else its template's rendering. A key that
    cannot be rendered is refused (``denied``, ``effect_key_error``) before any write."""
    spec, entry = call.spec, call.entry
    if spec.effect_key is not None:
        return check_label(spec.effect_key, "effect_key")
    template = spec.effect or (entry.effect if entry is not None else None)
    if template is None:
        return None
    try:
        key = template.render(call.action.plain_arguments, call.action.resource)  # reads only
        return check_label(key, "effect key")  # bad input: refused before any write
    except EffectKeyError as exc:
        exc.action_id = call.action.action_id
        cited = entry.controls if entry is not None else ()
        call.verdict = Verdict("deny", "effect_key_error", call.policy.policy_hash, cited)
        call.pre = (proposed(call.action),)
        refuse(call, exc, ReceiptResult.DENIED, denied_event(call, exc))


def approval_for(call: InFlight) -> str:
    """The approval ``call`` presents: the one given, else an unexpired grant made for the
    identical action (consumed by the first transaction). Otherwise it is refused: denied if
    a person denied exactly this call (until that answer expires), else ``ApprovalRequired``
    for a pending request (the existing one, if any)."""
    presented = call.spec.approval_id or current_approval()
    if presented is not None:
        return presented
    store = call.store
    found = store.find_approvals(call.action.action_hash, call.verdict.policy_hash)
    reuse = plan_reuse(found, now=call.clock())
    if reuse.granted is not None:
        return reuse.granted.approval_id
    refuse_before_asking(call)
    if reuse.denied is not None:
        denied_id = reuse.denied.approval_id
        why = store.denial_reason(denied_id)
        denied = ActionDenied(
            f"{call.action.name}: a person denied exactly this call"
            f" ({denied_id}, by {reuse.denied.approver})" + (f": {why}" if why else ""),
            reason=DenyReason.APPROVAL_DENIED,
            action_id=call.action.action_id,
            approver_reason=why,
        )
        refuse(call, denied, ReceiptResult.DENIED, denied_event(call, denied))
    raise approval_required(call, ask(call))


def refuse_before_asking(call: InFlight) -> None:
    """Nobody is asked about a key that committed, is in progress or is AMBIGUOUS: the call is
    refused as its reservation would be (recorded, one transaction), with no request,
    notification or inbox entry. The read is the one ``Control.evaluate`` makes."""
    if call.effect_key is None:
        return
    record = call.store.get_effect(call.effect_key)
    reconcilable = call.spec.reconcile is not None
    refusal = refusal_before_asking(record, now=call.clock(), reconcilable=reconcilable)
    if refusal is not None:
        refuse_start(call, refusal)


def ask(call: InFlight) -> ApprovalRecord:
    """The pending request for ``call`` under its approval rules: made now, or the one already
    waiting for the identical action (refused, ``blocked``, if its stored action was
    rewritten)."""
    rules, control = call.approval, call.control
    action = call.action.to_dict()
    draft = ApprovalRequestDraft(
        approval_id=new_id("apr"),
        action=action,
        action_hash=call.action.action_hash,
        policy_hash=call.verdict.policy_hash,
        ttl=rules.ttl or control.approval_ttl,
        required=rules.count,
        excluded=requesters(action) if rules.distinct_from_requester else (),
        notify=call.policy.notify,
        summary=summarize(call.action),
        budget=request_charge(call.action, call.policy.entry(call.action.name)),
    )
    record = call.store.put_approval_request(draft, call.pre)
    if record.approval_id == draft.approval_id:  # a new request, not the pending one
        emit_approval(control._sinks, "requested", record)
        return record
    tampered = tampering(record)  # the waiting one, as stored: is it still this action?
    if tampered is not None:  # its events went with the request's transaction
        event = replace(tampered_event(record), action_id=call.action.action_id)
        call.pre = ()
        refuse(call, tampered, ReceiptResult.BLOCKED, event)
    return record


def reserve(call: InFlight, approval_id: str | None) -> None:
    """The first transaction: reserve the key, consume the approval and the budget, write the
    events so far; sets ``call.started``. An AMBIGUOUS key is reconciled first when the call
    brings a hook; a start refused only for passing an ``over: approve`` budget's limit is
    asked about (``over_limit``). Any other refusal is recorded and raised."""
    entry, spec, rules = call.entry, call.spec, call.approval
    action = call.action
    budget = None
    if entry is not None and entry.budget is not None:  # unbudgeted calls pay nothing here
        budget = budget_charge(action, entry, lambda e: refuse_start(call, e), approval_id)
    request = StartRequest(
        action_id=action.action_id,
        effect_key=call.effect_key,
        lease=spec.lease or call.control.lease,
        approval_id=approval_id,
        action_hash=action.action_hash,
        policy_hash=call.verdict.policy_hash if approval_id is not None else None,
        approvals_required=rules.count,
        approvers_excluded=requesters(action.to_dict()) if rules.distinct_from_requester else (),
        approver_keys=call.policy.approvers or None,
        announce_ambiguous=told_of(call.policy.notify, _TOLD_OF_AMBIGUOUS),
        max_attempts=entry.max_attempts if entry is not None else None,
        events=call.pre,
        action_name=action.name,
        effect_template=template_source(call),
        budget=budget,
    )
    store = call.store
    try:
        call.started = store.start_action(request)
        return
    except AmbiguousEffect as exc:
        if spec.reconcile is None or call.effect_key is None:
            refuse_start(call, exc)
        reconciled = reconcile_blocked(store, action, call.effect_key, spec.reconcile)
        if reconciled.unwritten:  # they go with this call's next transaction
            call.pre = (*call.pre, *reconciled.unwritten)
            request = replace(request, events=call.pre)
        if not reconciled.retry:
            refuse_start(call, exc)
    except Refused as exc:  # past an over: approve budget's limit, a person decides
        if not needs_a_person(exc, request):
            refuse_start(call, exc)
        request = approved_start(request, approval_for(call), call.verdict.policy_hash)
    try:
        call.started = store.start_action(request)
    except Refused as exc:
        refuse_start(call, exc)


def template_source(call: InFlight) -> str | None:
    """The shape of the template ``call``'s key was rendered from (None for a key given
    outright, or no key): the store checks it against the action's remembered one. Its shape,
    not its source: a ``:int`` type refuses values but renders none differently (decision
    0026), so adding one reserves no new key."""
    spec, entry = call.spec, call.entry
    if call.effect_key is None or spec.effect_key is not None:
        return None
    template = spec.effect or (entry.effect if entry is not None else None)
    return template.shape if template is not None else None


def refuse_start(call: InFlight, exc: Refused) -> NoReturn:
    """Record the refusal of ``call``'s first transaction (``denied`` for a person's or the
    budget's answer, else ``blocked``) and raise it."""
    if isinstance(exc, ActionDenied) and exc.reason in DENIED_AT_START:
        refuse(call, exc, ReceiptResult.DENIED, denied_event(call, exc))
    if isinstance(exc, ApprovalMismatch) and exc.reason is MismatchReason.EXPIRED:
        sinks, approval_id = call.control._sinks, exc.approval_id
        record = call.store.get_approval(approval_id) if approval_id and sinks else None
        if record is not None:
            emit_approval(sinks, "expired", record)
    if isinstance(exc, AlreadyCommitted) and exc.receipt_id is None:
        exc.receipt_id = committed_receipt(call.store, exc.effect_key)
    if isinstance(exc, EffectTemplateChanged):
        exc.action_id = call.action.action_id
    refuse(call, exc, ReceiptResult.BLOCKED, refused_event(call, exc))


def refuse(call: InFlight, exc: Refused, result: ReceiptResult, event: EventDraft) -> NoReturn:
    """Record the refusal (the events so far, ``event`` and the receipt: one transaction),
    then raise it."""
    draft = receipt_draft(
        call.action,
        call.verdict,
        result,
        started_at=call.started_at,
        finished_at=call.clock(),
        effect_key=call.effect_key,
        error=describe(exc),
    )
    receipt = call.store.record((*call.pre, event), draft)
    assert receipt is not None
    emit(call.control._sinks, receipt)
    raise exc


# --- the executor, and after it -------------------------------------------------------------


def execute(call: InFlight, executor: Callable[..., Any]) -> tuple[Any, Receipt]:
    """Run the sync ``executor`` holding ``call``'s reservation, then ``finish``; the value and
    the receipt. An awaitable returned is refused (``refuse_awaitable``)."""
    reservation = call.started.reservation
    try:
        token = hold(call.effect_key, reservation.attempt if reservation is not None else None)
        try:
            value = executor(**call.action.canonical_arguments)
        finally:
            release(token)
    except NotExecuted as exc:
        finish(call, EffectState.FAILED, None, exc)
        raise
    except BaseException as exc:
        finish(call, EffectState.AMBIGUOUS, None, exc)
        raise
    if type(value) not in _NEVER_AWAITABLE and inspect.isawaitable(value):
        refuse_awaitable(call, value)
    return value, finish(call, _COMMITTED, value, None)


def refuse_awaitable(call: InFlight, value: Awaitable[Any]) -> NoReturn:
    """A sync call got an awaitable back: the work has not happened (a coroutine never
    started, closed here: FAILED) or is running unobserved (anything else: AMBIGUOUS).
    Never COMMITTED: that would spend the key on work nobody awaited."""
    error = InvalidArgument(
        f"{call.action.name}: the executor returned an awaitable; protect an async function"
        " with an async caller (await it, or use Control.arun)"
    )
    if inspect.iscoroutine(value):
        value.close()
        finish(call, EffectState.FAILED, None, error)
    else:
        finish(call, EffectState.AMBIGUOUS, None, error)
    raise error


def finish(call: InFlight, outcome: EffectState, value: Any, exc: BaseException | None) -> Receipt:
    """The second transaction: ``outcome``, its event and the receipt. An outcome the store
    refuses (the lease lapsed and the record moved) is recorded AMBIGUOUS and the refusal
    raised (for a COMMITTED or FAILED outcome); a store failure is ``OutcomeUnrecorded``."""
    error = describe(exc) if exc is not None else None
    request = finish_request(call, outcome, value, error, now=call.clock())
    sinks = call.control._sinks
    try:
        try:
            receipt = call.store.finish_action(request)
        except Refused as refusal:
            kept = outcome_refused(call, outcome, error, refusal)
            draft = outcome_draft(call, ReceiptResult.AMBIGUOUS, kept.detail, call.clock())
            stored = call.store.record((kept.event,), draft)
            assert stored is not None
            receipt = stored
            if outcome is not EffectState.AMBIGUOUS:
                emit(sinks, receipt)
                raise refusal from exc
    except StoreError as failure:  # after the executor ran: never "nothing happened"
        raise unrecorded(call, outcome, failure) from failure
    if sinks:
        emit(sinks, receipt)
    return receipt


def finish_request(
    call: InFlight, outcome: EffectState, value: Any, error: str | None, *, now: datetime
) -> FinishRequest:
    """The second transaction of ``call``: its outcome, the outcome's event and receipt (an
    observed call's only one: its first events go with it, and no effect record is touched)."""
    if call.observed is not None:
        return observed_request(call, outcome, value, error, now)
    started = call.started
    attempt = started.reservation.attempt if started.reservation is not None else None
    draft = outcome_draft(call, OUTCOME_RESULTS[outcome], error, now)
    data = attempt_data(attempt) if error is None else {"attempt": attempt, "error": error}
    event = EventDraft(OUTCOME_EVENTS[outcome], call.action.action_id, call.effect_key, None, data)
    return FinishRequest(
        action_id=call.action.action_id,
        receipt=draft,
        effect_key=call.effect_key,
        attempt=attempt,
        outcome=outcome if call.effect_key else None,
        result=value,
        error=error,
        events=(event,),
        notices=(ambiguous_notices(call, attempt, error, now) if outcome is _AMBIGUOUS else ()),
        give_back_budget=started.budget is not None and outcome is _FAILED,
    )


def outcome_draft(
    call: InFlight, result: ReceiptResult, error: str | None, now: datetime
) -> ReceiptDraft:
    """The receipt of ``call``'s attempt (as its reservation granted it) ending in ``result``."""
    started = call.started
    approval, reservation = started.approval, started.reservation
    return receipt_draft(
        call.action,
        call.verdict,
        result,
        started_at=call.started_at,
        finished_at=now,
        effect_key=call.effect_key,
        attempt=reservation.attempt if reservation is not None else None,
        approval_id=approval.approval_id if approval else None,
        approver=approval.approver if approval else None,
        signatures=approval.signatures if approval else (),
        error=error,
        budget=started.budget.to_dict() if started.budget is not None else None,
    )
