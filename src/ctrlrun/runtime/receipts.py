"""The receipt document a ``Control`` asks the store to chain, and the events it appends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from ctrlrun._time import encode_receipt_instant
from ctrlrun.canonical import new_id, plain_text, string_text
from ctrlrun.errors import evidence_name
from ctrlrun.kernel.action import Action
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.receipt import RECEIPT_SCHEMA, ReceiptDraft, ReceiptResult
from ctrlrun.store.codec import EncodedEventData, event_data_json, safe_text


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
) -> ReceiptDraft:
    """The receipt document, without the ``seq``/``prev_hash`` the store adds when chaining;
    its canonical text is prepared in parts, with the action's own texts reused. It has a
    ``controls`` key (sorted ids) only when the decision cited controls, and an
    ``approval_signatures`` key (``[{approver, signature}]``) only when the approval was
    signed."""
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
    if signatures:
        fields["approval_signatures"] = [{"approver": a, "signature": s} for a, s in signatures]
    parts = None if signatures else _parts(action, verdict, fields)
    if parts is None:
        texts = {"arguments": action.arguments_text, "principal": action.principal.text}
        return ReceiptDraft(fields, texts)
    return ReceiptDraft.from_parts(fields, parts)


_SCHEMA_TEXT: Final = string_text(RECEIPT_SCHEMA)
_OPTIONAL_TEXT: Final = (str, type(None))


def _parts(action: Action, verdict: Verdict, fields: dict[str, Any]) -> tuple[str, str, str] | None:
    """The draft's three canonical parts (around ``prev_hash`` and ``seq``), written out key by
    key in canonical order: what ``ReceiptDraft(fields, texts)`` prepares, without a lookup
    and a dispatch per key. None when a value is not of the type this layout assumes (the
    generic path then encodes it)."""
    attempt = fields["attempt"]
    if (
        type(attempt) not in _ATTEMPT_TYPES
        or type(verdict.decision) is not str
        or type(verdict.reason) is not str
        or type(verdict.policy_hash) is not str
        or type(fields["approval_id"]) not in _OPTIONAL_TEXT
        or type(fields["approver"]) not in _OPTIONAL_TEXT
        or type(fields["effect_key"]) not in _OPTIONAL_TEXT
    ):
        return None
    controls = fields.get("controls")
    controls_text = "" if controls is None else ',"controls":' + plain_text(controls)
    text = string_text
    approval_id = "null" if (value := fields["approval_id"]) is None else text(value)
    approver = "null" if (value := fields["approver"]) is None else text(value)
    effect_key = "null" if (value := fields["effect_key"]) is None else text(value)
    error = "null" if (value := fields["error"]) is None else text(value)
    resource = "null" if action.resource is None else text(action.resource)
    # f-strings: one allocation per part, where `+` would build every intermediate string.
    before = (
        f'"action":{text(action.name)},"action_hash":{text(action.action_hash)}'
        f',"action_id":{text(action.action_id)},"approval_id":{approval_id}'
        f',"approver":{approver},"arguments":{action.arguments_text}'
        f',"attempt":{"null" if attempt is None else int.__repr__(attempt)}'
        f"{controls_text}"
        f',"decision":{text(verdict.decision)},"decision_reason":{text(verdict.reason)}'
        f',"effect_key":{effect_key},"environment":{text(action.environment)}'
        f',"error":{error},"finished_at":{text(fields["finished_at"])}'
        f',"policy_hash":{text(verdict.policy_hash)}'
    )
    between = (
        f'"principal":{action.principal.text},"receipt_id":{text(fields["receipt_id"])}'
        f',"resource":{resource},"result":{text(fields["result"])},"schema":{_SCHEMA_TEXT}'
    )
    return before, between, f'"started_at":{text(fields["started_at"])}'


_ATTEMPT_TYPES: Final = (int, type(None))


def _receipt_instant(value: datetime) -> str:
    """``encode_receipt_instant``, without its conversions for an instant already in UTC
    (every clock's reading is): ISO-8601 with milliseconds and ``Z``."""
    if value.tzinfo is UTC:
        # isoformat() without a timespec is the cheaper call; milliseconds truncate, as
        # timespec="milliseconds" does, and a zero fraction is dropped by it
        if value.microsecond:
            return value.isoformat()[:23] + "Z"
        return value.isoformat(timespec="milliseconds")[:-6] + "Z"
    return encode_receipt_instant(value)


def describe(exc: BaseException) -> str:
    """``Type: message`` for evidence; never raises."""
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
            "arguments": action.plain_arguments,  # encoded at once, never mutated
            "environment": action.environment,
            "name": action.name,
            "principal": action.principal.to_dict(),
            "resource": action.resource,
        },
        "action_hash": action.action_hash,
    }
    stored = action.stored_text
    if stored.isascii():
        # The "action" value is the action's stored document, already canonical text; the
        # event encoder escapes only what the canonical one does when the text is ASCII.
        text = '{"action":' + stored + ',"action_hash":' + string_text(action.action_hash) + "}"
        data = EncodedEventData(data, text)
    return EventDraft(EventType.ACTION_PROPOSED, action.action_id, data=data)


def evaluated(action: Action, verdict: Verdict, effect_key: str | None) -> EventDraft:
    """``POLICY_EVALUATED`` with the decision, its reason, the policy hash and (when any) the
    controls it was decided under."""
    data = _evaluated_data.get(verdict)
    if data is None:
        plain = {
            "decision": verdict.decision,
            "reason": verdict.reason,
            "policy_hash": verdict.policy_hash,
            **({"controls": list(verdict.controls)} if verdict.controls else {}),
        }
        data = EncodedEventData(plain, event_data_json(plain))
        if len(_evaluated_data) >= _EVALUATED_KEPT:
            _evaluated_data.clear()  # a policy with many rules: start over, never grow
        _evaluated_data[verdict] = data
    return EventDraft(EventType.POLICY_EVALUATED, action.action_id, effect_key, data=data)


# A verdict's event data is the same for every call it decides, so it is built and encoded
# once per verdict (read-only, like every EncodedEventData); bounded, not an LRU.
_EVALUATED_KEPT: Final = 256
_evaluated_data: dict[Verdict, EncodedEventData] = {}
