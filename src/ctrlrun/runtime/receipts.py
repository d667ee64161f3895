"""The receipt document a ``Control`` asks the store to chain, and the events it appends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ctrlrun._time import encode_receipt_instant
from ctrlrun.canonical import new_id, string_text
from ctrlrun.errors import evidence_name
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.evidence_text import EncodedEventData, event_data_json, safe_text
from ctrlrun.kernel.receipt import RECEIPT_SCHEMA, ReceiptDraft, ReceiptResult

# Read once, not per call: an ``EnumClass.MEMBER`` read costs ~850 instructions on 3.11
# (docs/performance.md, "Less Python per call, third pass").
_PROPOSED, _EVALUATED = EventType.ACTION_PROPOSED, EventType.POLICY_EVALUATED


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
    signatures: tuple[tuple[str, str], ...] = (),
    observed: dict[str, Any] | None = None,
    budget: dict[str, Any] | None = None,
) -> ReceiptDraft:
    """The receipt document, without the ``seq``/``prev_hash`` the store adds when chaining;
    its canonical text is prepared in parts, with the action's own texts reused. It has a
    ``controls`` key (sorted ids) only when the decision cited controls, and an
    ``approval_signatures`` key (``[{approver, signature}]``) only when the approval was
    signed, an ``observed`` key only for an observed call (``mode: observe``), and a ``budget``
    key (spent before/after, limit, window: ``BudgetState.to_dict``) only for a budgeted one."""
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
        "started_at": encode_receipt_instant(started_at),
        "finished_at": encode_receipt_instant(finished_at),
    }
    if verdict.controls:
        fields["controls"] = list(verdict.controls)
    if signatures:
        fields["approval_signatures"] = [{"approver": a, "signature": s} for a, s in signatures]
    if observed is not None:
        fields["observed"] = observed
    if budget is not None:
        fields["budget"] = budget
    texts = {"arguments": action.arguments_text, "principal": action.principal.text}
    return ReceiptDraft(fields, texts)


CANCELLATIONS: Final = frozenset(
    {
        ("asyncio.exceptions", "CancelledError"),
        ("concurrent.futures._base", "CancelledError"),
        ("trio", "Cancelled"),
    }
)
"""Cancellation exceptions, by module and name (``import ctrlrun`` imports no event loop)."""
CANCELLED_NOTE: Final = "the caller was cancelled (a timeout, a shutdown or a task cancel)"


def describe(exc: BaseException) -> str:
    """``Type: message`` for evidence; never raises. A cancellation's message is the event
    loop's own (``Cancelled via cancel scope 7f…``): it is written as what happened instead,
    for the person who reads the note."""
    if (type(exc).__module__, type(exc).__name__) in CANCELLATIONS:
        return f"{evidence_name(exc)}: {CANCELLED_NOTE}"
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not cost the evidence
        text = "<unprintable>"
    name = evidence_name(exc)
    return safe_text(f"{name}: {text}" if text else name)


def proposed(action: Action) -> EventDraft:
    """``ACTION_PROPOSED`` carrying the whole action, so an in-flight call can be inspected."""
    data: dict[str, Any] = {
        "action": {
            "action_id": action.action_id,
            "arguments": action.plain_arguments,  # encoded with the event, never mutated
            "environment": action.environment,
            "name": action.name,
            "principal": action.principal.to_dict(),
            "resource": action.resource,
        },
        "action_hash": action.action_hash,
    }
    # The action's canonical text is the event's bytes too when it is printable ASCII (only
    # the event encoder escapes past it): reused, 31k of ~1,000k instructions per call
    text = action.stored_text
    if text.isascii() and "\x7f" not in text:
        hashed = string_text(action.action_hash)
        data = EncodedEventData(data, f'{{"action":{text},"action_hash":{hashed}}}')
    return EventDraft(_PROPOSED, action.action_id, None, None, data)


def decided(decision: str, reason: str, policy_hash: str, controls: tuple[str, ...]) -> Verdict:
    """``Verdict(decision, reason, policy_hash, controls)``: the one kept for these values (a
    policy decides the same few verdicts for every call; see ``_verdicts``)."""
    return _verdict_entry((decision, reason, policy_hash, controls))[0]


def evaluated(action: Action, verdict: Verdict, effect_key: str | None) -> EventDraft:
    """``POLICY_EVALUATED`` with the decision, its reason, the policy hash and (when any) the
    controls it was decided under."""
    key = (verdict.decision, verdict.reason, verdict.policy_hash, verdict.controls)
    data = _verdict_entry(key)[1]
    return EventDraft(_EVALUATED, action.action_id, effect_key, None, data)


VerdictKey = tuple[str, str, str, tuple[str, ...]]

# Each verdict a policy decides is built once, with its POLICY_EVALUATED data encoded (both
# read-only), and found by its values: a tuple is hashed and compared in C, where a frozen
# dataclass is built, hashed and compared in Python (12.2k -> 2.0k instructions per call for
# the verdict, callgrind, 6 December 2026). Bounded, not an LRU.
_VERDICTS_KEPT: Final = 256
_verdicts: dict[VerdictKey, tuple[Verdict, EncodedEventData]] = {}


def _verdict_entry(key: VerdictKey) -> tuple[Verdict, EncodedEventData]:
    entry = _verdicts.get(key)
    if entry is None:
        decision, reason, policy_hash, controls = key
        plain = {
            "decision": decision,
            "reason": reason,
            "policy_hash": policy_hash,
            **({"controls": list(controls)} if controls else {}),
        }
        entry = (Verdict(*key), EncodedEventData(plain, event_data_json(plain)))
        if len(_verdicts) >= _VERDICTS_KEPT:
            _verdicts.clear()  # a policy with many rules: start over, never grow
        _verdicts[key] = entry
    return entry
