"""The receipt document a ``Control`` asks the store to chain, and the events it appends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ctrlrun._time import encode_receipt_instant
from ctrlrun.canonical import new_id
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.receipt import RECEIPT_SCHEMA, ReceiptDraft, ReceiptResult
from ctrlrun.store.codec import safe_text


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy decided, as receipts and events carry it; ``controls`` are the control
    ids it was decided under (carried only when there are any)."""

    decision: str
    reason: str
    policy_hash: str
    controls: tuple[str, ...] = ()


def receipt_draft(
    action: Action,
    verdict: Verdict,
    result: ReceiptResult,
    *,
    started_at: datetime,
    finished_at: datetime,
    effect_key: str | None = None,
    attempt: int | None = None,
    approval_id: str | None = None,
    approver: str | None = None,
    error: str | None = None,
) -> ReceiptDraft:
    """The receipt document, without the ``seq``/``prev_hash`` the store adds when chaining;
    its canonical text is prepared in parts, with the action's own texts reused. It has a
    ``controls`` key (sorted ids) only when the decision cited controls."""
    fields: dict[str, Any] = {
        "schema": RECEIPT_SCHEMA,
        "receipt_id": new_id("rcp"),
        "action_id": action.action_id,
        "action": action.name,
        "action_hash": action.action_hash,
        "principal": action.principal.to_dict(),
        "resource": action.resource,
        "environment": action.environment,
        "arguments": action.plain_arguments,
        "decision": verdict.decision,
        "decision_reason": verdict.reason,
        "policy_hash": verdict.policy_hash,
        "approval_id": approval_id,
        "approver": approver,
        "effect_key": effect_key,
        "attempt": attempt,
        "result": str(result),
        "error": None if error is None else safe_text(error),
        "started_at": _receipt_instant(started_at),
        "finished_at": _receipt_instant(finished_at),
    }
    if verdict.controls:
        fields["controls"] = list(verdict.controls)
    texts = {"arguments": action.arguments_text, "principal": action.principal.text}
    return ReceiptDraft(fields, texts)


def _receipt_instant(value: datetime) -> str:
    """``encode_receipt_instant``, without its conversions for an instant already in UTC
    (every clock's reading is): ISO-8601 with milliseconds and ``Z``."""
    if value.tzinfo is UTC:
        return value.isoformat(timespec="milliseconds")[:-6] + "Z"  # drop "+00:00"
    return encode_receipt_instant(value)


def describe(exc: BaseException) -> str:
    """``Type: message`` for evidence; never raises."""
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not cost the evidence
        text = "<unprintable>"
    return safe_text(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def proposed(action: Action) -> EventDraft:
    """``ACTION_PROPOSED`` carrying the whole action, so an in-flight call can be inspected."""
    return EventDraft(
        EventType.ACTION_PROPOSED,
        action.action_id,
        data={
            "action": {
                "action_id": action.action_id,
                "arguments": action.plain_arguments,  # encoded at once, never mutated
                "environment": action.environment,
                "name": action.name,
                "principal": action.principal.to_dict(),
                "resource": action.resource,
            },
            "action_hash": action.action_hash,
        },
    )


def evaluated(action: Action, verdict: Verdict, effect_key: str | None) -> EventDraft:
    """``POLICY_EVALUATED`` with the decision, its reason, the policy hash and (when any) the
    controls it was decided under."""
    return EventDraft(
        EventType.POLICY_EVALUATED,
        action.action_id,
        effect_key,
        data={
            "decision": verdict.decision,
            "reason": verdict.reason,
            "policy_hash": verdict.policy_hash,
            **({"controls": list(verdict.controls)} if verdict.controls else {}),
        },
    )
