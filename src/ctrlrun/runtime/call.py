"""One protected call's parts: how it is to be protected (``CallSpec``), and the events,
refusals and records of its less travelled paths (a refusal, an AMBIGUOUS outcome, an outcome
the store would not take). The call itself runs in ``runtime.pipeline`` (decision 0030), whose
happy path enters this module not at all."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ctrlrun._time import check_positive
from ctrlrun.display import command_line
from ctrlrun.errors import (
    ActionDenied,
    ApprovalMismatch,
    ApprovalRequired,
    DuplicateEffect,
    EffectTemplateChanged,
    OutcomeUnrecorded,
    Refused,
    StoreError,
)
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.approval import ApprovalRecord
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.notify import Notice, NotifyKind, notices
from ctrlrun.kernel.notify_body import ambiguous_event
from ctrlrun.kernel.receipt import ReceiptResult
from ctrlrun.kernel.template import Template
from ctrlrun.kernel.text import check_label
from ctrlrun.runtime.receipts import describe
from ctrlrun.runtime.reconcile import Reconcile
from ctrlrun.store.protocol import StateStore

if TYPE_CHECKING:
    from ctrlrun.runtime.pipeline import InFlight

log = logging.getLogger("ctrlrun")


@dataclass(frozen=True, slots=True)
class CallSpec:
    """How one call is to be protected, beyond what the policy says."""

    effect_key: str | None = None
    effect: Template | None = None
    lease: timedelta | None = None
    reconcile: Reconcile | None = None
    approval_id: str | None = None


OUTCOME_EVENTS = {
    EffectState.COMMITTED: EventType.EXECUTION_COMMITTED,
    EffectState.FAILED: EventType.EXECUTION_FAILED,
    EffectState.AMBIGUOUS: EventType.EXECUTION_AMBIGUOUS,
}


OUTCOME_RESULTS = {state: ReceiptResult(state.value) for state in OUTCOME_EVENTS}


def unrecorded(call: InFlight, outcome: EffectState, failure: StoreError) -> OutcomeUnrecorded:
    """The error for an executor that ran but whose outcome the store did not take (logged)."""
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


def denied_event(call: InFlight, exc: ActionDenied) -> EventDraft:
    """The ``ACTION_DENIED`` event of a denied call."""
    return EventDraft(
        EventType.ACTION_DENIED,
        call.action.action_id,
        call.effect_key,
        data={"reason": str(exc.reason), "rule": exc.rule},
    )


def make_spec(
    effect_key: str | None,
    effect: str | Template | None,
    lease: timedelta | None,
    reconcile: Reconcile | None,
    approval_id: str | None,
) -> CallSpec:
    """The ``CallSpec`` of ``Control.execute``'s keywords, checked (``InvalidArgument``)."""
    if effect_key is not None:
        check_label(effect_key, "effect_key")
    template = Template.parse(effect) if isinstance(effect, str) else effect
    if lease is not None:
        check_positive(lease, "lease")
    return CallSpec(effect_key, template, lease, reconcile, approval_id)


def summarize(action: Action) -> str:
    """One line for a person: ``stripe.refund {"amount": 5, …} by support-bot/alice``, the
    arguments whole (a person approves from it; every surface escapes what it shows)."""
    principal = action.principal
    who = principal.agent if principal.user is None else f"{principal.agent}/{principal.user}"
    return f"{action.name} {action.arguments_text} by {who}"


def ambiguous_notices(
    call: InFlight, attempt: int | None, error: str | None, now: datetime
) -> tuple[Notice, ...]:
    """The messages announcing that ``call``'s effect became AMBIGUOUS, one per target the
    policy tells of ``ambiguous`` (deduped per key, attempt and target)."""
    if call.effect_key is None:
        return ()
    event = ambiguous_event(
        effect_key=call.effect_key,
        attempt=attempt,
        action=call.action.to_dict(),
        error=error,
        summary=summarize(call.action),
        at=now,
    )
    subject = f"{call.effect_key}/{attempt}"
    return notices(call.policy.notify, NotifyKind.AMBIGUOUS, event, subject)


def refused_event(call: InFlight, exc: Refused) -> EventDraft:
    """The event of a call the first transaction refused: ``APPROVAL_INVALIDATED`` naming the
    approval, or ``EFFECT_RESERVATION_REFUSED`` with the record's state or the templates."""
    data = {"reason": str(exc.reason)}
    if isinstance(exc, ApprovalMismatch):  # the approval named, for `ctrlrun inspect`
        kind, approval_id = EventType.APPROVAL_INVALIDATED, exc.approval_id
        return EventDraft(kind, call.action.action_id, call.effect_key, approval_id, data)
    if isinstance(exc, DuplicateEffect):
        data["state"] = str(exc.state)
    if isinstance(exc, EffectTemplateChanged):
        data.update(remembered=exc.remembered, presented=exc.presented)
    kind = EventType.EFFECT_RESERVATION_REFUSED
    return EventDraft(kind, call.action.action_id, call.effect_key, None, data)


def approval_required(call: InFlight, record: ApprovalRecord) -> ApprovalRequired:
    """The refusal of a call that waits for a person: the request and the command to run."""
    return ApprovalRequired(
        f"{call.action.name} needs a human:"
        f" `{command_line('ctrlrun', 'approve', record.approval_id)}`; once granted, the"
        " identical call runs",
        request_id=record.approval_id,
        action_id=call.action.action_id,
        action_hash=record.action_hash,
        expires_at=record.expires_at,
        summary=summarize(call.action),
        action=call.action.name,
        rule=call.verdict.reason,
        effect_key=call.effect_key,
    )


def committed_receipt(store: StateStore, effect_key: str) -> str | None:
    """The receipt of the attempt that committed ``effect_key`` (a read on the refusal path
    only), so an idempotent replay can point at it."""
    record = store.get_effect(effect_key)
    if record is None:
        return None
    for receipt in reversed(store.receipts(record.action_id)):
        document = receipt.document
        if document.get("effect_key") == effect_key and document.get("result") == "committed":
            return receipt.receipt_id
    return None


@dataclass(frozen=True, slots=True)
class RefusedOutcome:
    """What to record when the store would not take an outcome: one event, and the error
    text of the AMBIGUOUS receipt that goes with it."""

    event: EventDraft
    detail: str


def outcome_refused(
    call: InFlight, outcome: EffectState, error: str | None, refusal: Refused
) -> RefusedOutcome:
    """The store would not take the outcome (the lease lapsed and a contender, or a human,
    moved the record): what happened is unknown to the store, so the receipt says AMBIGUOUS
    and names both the outcome and the refusal (logged)."""
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
    reservation = call.started.reservation
    event = EventDraft(
        EventType.EXECUTION_AMBIGUOUS,
        call.action.action_id,
        call.effect_key,
        data={
            "attempt": reservation.attempt if reservation is not None else None,
            "intended": str(outcome),
            "error": detail,
        },
    )
    return RefusedOutcome(event, detail)
