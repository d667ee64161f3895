"""What a notification says: the event a new approval request or a new AMBIGUOUS effect leaves
in the outbox (its facts only), and the body a target receives, rendered at delivery.

Everything a person reads in a body (the summary line, the error, the commands, every line of
a Slack text) goes through ``display.escape_text``, the rule the terminal uses: a bidi
override, a line or paragraph separator or a C0/C1 control in an argument shows as a visible
escape and can never start a line of its own. ``data.action`` stays the exact values (a
receiver can recompute the action hash from them); the wire is ASCII JSON. Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote

from ctrlrun._time import encode_instant
from ctrlrun.display import command_line, escape_text
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.action import recomputed_hash
from ctrlrun.kernel.argument_display import Money, shown_arguments
from ctrlrun.kernel.budget import Budget
from ctrlrun.kernel.budget_facts import shown_budget
from ctrlrun.kernel.effect import EffectRecord, idempotency_token_for
from ctrlrun.kernel.notify import AMBIGUOUS_EVENT_TYPE, EVENT_TYPE, BodyFormat

_ACTION_KEYS: Final = ("name", "arguments", "principal", "resource", "environment")


def _action(action: dict[str, Any]) -> dict[str, Any]:
    return {k: action.get(k) for k in _ACTION_KEYS}


def approval_event(
    *,
    approval_id: str,
    action: dict[str, Any],
    action_hash: str,
    policy_hash: str,
    expires_at: datetime,
    summary: str,
    created_at: datetime,
    required: int = 1,
    budget: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """The event of a new approval request (Standard Webhooks shape: ``type``, ``timestamp``,
    ``data``), with the environment, the approvers still needed (``approvers_needed``: every
    one of them, at the request), the command that grants it and, for a budgeted action, the
    budget's state the store read with the request (``budget``: ``BudgetFacts``' form)."""
    event: dict[str, Any] = {
        "type": EVENT_TYPE,
        "timestamp": encode_instant(created_at),
        "data": {
            "approval_id": approval_id,
            "action": _action(action),
            "environment": action.get("environment"),
            "action_hash": action_hash,
            "policy_hash": policy_hash,
            "expires_at": encode_instant(expires_at),
            "approvers_needed": required,
            "summary": summary,
            "approve": command_line("ctrlrun", "approve", approval_id),
        },
    }
    if budget is not None:
        event["data"]["budget"] = dict(budget)
    return event


def ambiguous_event(
    *,
    effect_key: str,
    attempt: int | None,
    action: dict[str, Any],
    error: str | None,
    summary: str,
    at: datetime,
) -> dict[str, Any]:
    """The event of an effect that became AMBIGUOUS: what a person needs to ask the provider
    (the action, its arguments, the principal, the attempt and its idempotency token) and the
    two commands that settle it, shell-quoted."""
    token = idempotency_token_for(effect_key, attempt) if attempt is not None else None
    return {
        "type": AMBIGUOUS_EVENT_TYPE,
        "timestamp": encode_instant(at),
        "data": {
            "effect_key": effect_key,
            "attempt": attempt,
            "idempotency_token": token,
            "action": _action(action),
            "environment": action.get("environment"),
            "error": error,
            "summary": summary,
            "resolve": {
                outcome: command_line("ctrlrun", "resolve", effect_key, f"--{outcome}")
                for outcome in ("committed", "failed")
            },
        },
    }


def lapsed_event(
    record: EffectRecord, *, error: str, detected_by: str, at: datetime
) -> dict[str, Any]:
    """The event of an effect found AMBIGUOUS because its holder's lease lapsed before an
    outcome was recorded (the holder may have died mid-call). The store knows the key, the
    attempt and the holder's action id, not the call's arguments: ``ctrlrun inspect`` and
    the console show the rest."""
    key, attempt = record.effect_key, record.attempt
    event = ambiguous_event(
        effect_key=key,
        attempt=attempt,
        action={},
        error=error,
        summary=f"attempt {attempt} of {key} lapsed before its outcome was recorded",
        at=at,
    )
    event["data"] |= {"action_id": record.action_id, "detected_by": detected_by}
    return event


def console_link(event: dict[str, Any], console_url: str | None) -> str | None:
    """Where the console shows ``event``'s request or effect, when a console is configured."""
    if not console_url:
        return None
    base, data = console_url.rstrip("/"), event.get("data") or {}
    if event.get("type") == EVENT_TYPE:
        return f"{base}/#request-{quote(str(data.get('approval_id')), safe='')}"
    return f"{base}/effect?key={quote(str(data.get('effect_key')), safe='')}"


TAMPERED_TYPE: Final = "approval.tampered"


def tampered_event(event: dict[str, Any]) -> dict[str, Any] | None:
    """For an approval event whose action does not hash to the ``action_hash`` it names (the
    outbox row rewritten): the ``approval.tampered`` event sent instead, with the request, both
    hashes and a warning, and no action; None for an intact one (or another kind of event)."""
    if event.get("type") != EVENT_TYPE:
        return None
    data = event["data"]
    action = data.get("action")
    found = recomputed_hash(action) if isinstance(action, dict) else None
    if found is not None and found == data.get("action_hash"):
        return None
    return {
        "type": TAMPERED_TYPE,
        "timestamp": escape_text(str(event.get("timestamp"))),
        "data": {
            "approval_id": escape_text(str(data.get("approval_id"))),
            "action_hash": escape_text(str(data.get("action_hash"))),
            "recomputed_hash": found,
            "summary": (
                "TAMPERED: this notification's action does not hash to the action the request"
                " binds; do not approve it"
            ),
        },
    }


def _tampered_text(tampered: dict[str, Any]) -> str:
    data = tampered["data"]
    text = f"TAMPERED approval request ({data['approval_id']}): {data['summary']}"
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(
    event: object,
    form: BodyFormat,
    console_url: str | None = None,
    displays: Mapping[str, Money] | None = None,
    budget: Budget | None = None,
) -> dict[str, Any]:
    """The body a target of ``form`` receives for ``event`` (read from a store: checked here,
    ``InvalidArgument`` when it is not an event this version writes). ``displays`` (the
    policy's ``display:`` for the action, read at delivery) adds the money arguments as a
    person reads them: ``data.shown`` and an ``Amounts:`` line. A request's recorded budget
    is checked against its action (and ``budget``, the policy's when the policy is the
    request's: ``budget_facts.mismatch``) and shown as ``data.budget_text`` and a
    ``Budget:`` line; facts that fail the check are dropped and the line says why."""
    if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
        raise InvalidArgument("the message carries no event")
    if event.get("type") not in (EVENT_TYPE, AMBIGUOUS_EVENT_TYPE):
        raise InvalidArgument(f"unknown event type {escape_text(str(event.get('type')))!r}")
    tampered = tampered_event(event)
    if tampered is not None:  # never show an action that is not the one a grant binds
        return {"text": _tampered_text(tampered)} if form is BodyFormat.SLACK else tampered
    link = console_link(event, console_url)
    shown = _shown(event["data"], displays)
    action = event["data"].get("action")
    checked = shown_budget(
        event["data"].get("budget"), action if isinstance(action, dict) else {}, budget, displays
    )
    if form is BodyFormat.SLACK:
        return {"text": _slack_text(event, link, shown, checked.line())}
    body = copy.deepcopy(event)
    data = body["data"]
    if shown:
        data["shown"] = shown
    if "budget" in data:  # only checked facts go out, with the line a person reads
        data["budget"] = None if checked.facts is None else checked.facts.to_dict()
        data["budget_text"] = checked.line()
    for key in ("summary", "error", "approve"):
        if isinstance(data.get(key), str):
            data[key] = escape_text(data[key])
    if isinstance(data.get("resolve"), dict):
        data["resolve"] = {k: escape_text(str(v)) for k, v in data["resolve"].items()}
    if link is not None:
        data["console_url"] = link
    return body


def _shown(data: dict[str, Any], displays: Mapping[str, Money] | None) -> dict[str, str]:
    action = data.get("action")
    arguments = action.get("arguments") if isinstance(action, dict) else None
    if not displays or not isinstance(arguments, dict):
        return {}
    return shown_arguments(arguments, displays)


def _slack_text(
    event: dict[str, Any], link: str | None, shown: dict[str, str], budget: str | None
) -> str:
    """Lines of our own, each agent-controlled part escaped (so none can add a line), then
    Slack's markup characters escaped."""
    data = event["data"]

    def show(key: str) -> str:
        return escape_text(str(data.get(key)))

    if event["type"] == EVENT_TYPE:
        lines = [
            f"Approval needed: {show('summary')}",
            f"Environment: {show('environment')} | approvers still needed:"
            f" {show('approvers_needed')} | expires {show('expires_at')}",
            f"Request {show('approval_id')}: {show('approve')}",
        ]
    else:
        resolve = data.get("resolve") if isinstance(data.get("resolve"), dict) else {}
        lines = [
            f"Outcome unknown (AMBIGUOUS): {show('summary')}",
            f"Environment: {show('environment')} | effect {show('effect_key')} | attempt"
            f" {show('attempt')} | idempotency token {show('idempotency_token')}",
            f"Error: {show('error')}",
            "Ask the provider what happened, then: "
            + " or ".join(escape_text(str(v)) for v in resolve.values()),
        ]
    if shown:
        amounts = ", ".join(f"{escape_text(k)} {v}" for k, v in sorted(shown.items()))
        lines.insert(1, f"Amounts: {amounts}")
    if budget is not None:
        lines.insert(1, f"Budget: {escape_text(budget)}")
    if link is not None:
        lines.append(f"Console: {link}")
    text = "\n".join(lines)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
