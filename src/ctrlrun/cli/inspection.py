"""``ctrlrun inspect ACTION_ID``: everything the store knows about one action.

The action itself comes from its ``ACTION_PROPOSED`` event (so an action still in flight, or
waiting for a human, can be inspected), else from its receipt or its approval request. Approval
answers are events that carry the approval id but no action id; they are included for every
approval the action requested, presented or spent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Final

import click

from ctrlrun._time import decode_instant, display_instant, utc_now
from ctrlrun.cli.approvals import (
    answers_given,
    answers_line,
    approval_document,
    denial_reasons,
    shown_status,
)
from ctrlrun.cli.common import (
    Refusal,
    compact,
    display_policy,
    existing_store,
    instant,
    json_line,
    shown_compact,
    store_url_option,
    table,
    when,
    who,
)
from ctrlrun.cli.effects import effect_document, shown_state
from ctrlrun.cli.receipts import read_document, receipt_json
from ctrlrun.display import command_line
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus
from ctrlrun.kernel.argument_display import shown_arguments
from ctrlrun.kernel.effect import EffectRecord
from ctrlrun.kernel.event import Event, EventType
from ctrlrun.kernel.receipt import Receipt, place
from ctrlrun.store.protocol import StateStore
from ctrlrun.store.templates import KeyTemplate, effect_templates

INSPECTION_SCHEMA: Final = "ctrlrun.inspection/v1"
_ACTION_FIELDS: Final = ("action_id", "name", "principal", "arguments", "resource", "environment")


@dataclass
class Inspection:
    """What the store holds about one action."""

    action_id: str
    action: dict[str, Any] | None = None
    action_hash: str | None = None
    decision: dict[str, Any] | None = None
    approvals: list[ApprovalRecord] = field(default_factory=list)
    effect_key: str | None = None
    effect: EffectRecord | None = None
    reasons: dict[str, str] = field(default_factory=dict)
    receipts: list[Receipt] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    key_template: KeyTemplate | None = None


def gather(store: StateStore, subject: str) -> Inspection:
    """The inspection of ``subject`` (an action id, or an approval id standing for the action
    that requested it). ``Refusal`` if the store has nothing about it. Reads only."""
    action_id = subject
    requested = store.get_approval(subject) if subject.startswith("apr_") else None
    if requested is not None and requested.action.get("action_id"):
        action_id = str(requested.action["action_id"])
    own = list(store.events(action_id))
    found = Inspection(action_id, receipts=list(store.receipts(action_id)))
    mentioned = {e.approval_id for e in own if e.approval_id}
    found.approvals = [
        a
        for a in store.list_approvals()
        if a.approval_id in mentioned
        or a.action.get("action_id") == action_id
        or a.consumed_by == action_id
    ]
    if not own and not found.receipts and not found.approvals:
        raise Refusal(f"no action {subject} in this store")
    ids = {a.approval_id for a in found.approvals}
    everything = store.events()
    answers = [e for e in everything if e.approval_id in ids and e.action_id != action_id]
    found.reasons = denial_reasons(store, found.approvals)
    documents = [d for d in map(read_document, found.receipts) if isinstance(d, dict)]
    _fill_action(found, own, documents)
    name = (found.action or {}).get("name")
    if isinstance(name, str):  # the template its keys are reserved under, and its changes
        found.key_template = next(iter(effect_templates(store, name)), None)
        answers += [
            e
            for e in everything
            if e.type is EventType.EFFECT_TEMPLATE_ACCEPTED and e.data.get("action") == name
        ]
    found.events = sorted([*own, *answers], key=lambda e: e.event_id)
    found.effect_key = next(
        (str(k) for k in (*(d.get("effect_key") for d in documents), *_keys(own)) if k), None
    )
    if found.effect_key is not None:
        found.effect = store.get_effect(found.effect_key)
    return found


def _keys(events: Iterable[Event]) -> Iterable[str | None]:
    return (e.effect_key for e in events)


def _fill_action(found: Inspection, own: list[Event], documents: list[dict[str, Any]]) -> None:
    """The action and the decision, from the best source each has."""
    for event in own:
        if event.type is EventType.ACTION_PROPOSED and found.action is None:
            found.action = dict(event.data.get("action") or {}) or None
            found.action_hash = event.data.get("action_hash")
        if event.type is EventType.POLICY_EVALUATED and found.decision is None:
            found.decision = {k: event.data.get(k) for k in ("decision", "reason", "policy_hash")}
    if documents:
        first = documents[0]
        if found.action is None:
            found.action = {k: first.get("action" if k == "name" else k) for k in _ACTION_FIELDS}
            found.action_hash = first.get("action_hash")
        if found.decision is None:
            found.decision = {
                "decision": first.get("decision"),
                "reason": first.get("decision_reason"),
                "policy_hash": first.get("policy_hash"),
            }
    if found.action is None and found.approvals:
        found.action = dict(found.approvals[0].action)
        found.action_hash = found.approvals[0].action_hash


def inspection_json(found: Inspection) -> dict[str, Any]:
    """The ``--json`` document (``ctrlrun.inspection/v1``)."""
    now = utc_now()
    answers = answers_given(found.events)
    return {
        "schema": INSPECTION_SCHEMA,
        "action_id": found.action_id,
        "action": found.action,
        "action_hash": found.action_hash,
        "decision": found.decision,
        "approvals": [
            approval_document(a, now, found.reasons.get(a.approval_id), answers.get(a.approval_id))
            for a in found.approvals
        ],
        "effect_key": found.effect_key,
        "effect": None
        if found.effect is None
        else {**effect_document(found.effect, now), "resolve_reason": _resolve_reason(found)},
        "effect_template": _template_document(found.key_template),
        "receipts": [receipt_json(r) for r in found.receipts],
        "events": [e.to_dict() for e in found.events],
    }


def _template_document(template: KeyTemplate | None) -> dict[str, Any] | None:
    if template is None:
        return None
    return {
        "template": template.template,
        "recorded_at": instant(template.recorded_at),
        "accepted_by": template.accepted_by,
    }


def _template_line(template: KeyTemplate) -> str:
    how = f"accepted by {template.accepted_by}" if template.accepted_by else "recorded by a call"
    return f"{template.template}  {how} {when(template.recorded_at)}"


def _decision_line(decision: Mapping[str, Any] | None) -> str:
    if decision is None:
        return "-"
    return (
        f"{decision.get('decision')} ({decision.get('reason')})"
        f" under policy {decision.get('policy_hash')}"
    )


def _effect_line(found: Inspection) -> str:
    record = found.effect
    if found.effect_key is None:
        return "- (this action names no effect key)"
    if record is None:
        return f"{found.effect_key}  (no record: nothing was reserved)"
    line = f"{record.effect_key}  {shown_state(record, utc_now())}  attempt {record.attempt}"
    if record.action_id != found.action_id:
        line += f"  (by {record.action_id}, not this action)"
    if record.resolved_by:
        line += f"  resolved by {record.resolved_by}"
        reason = _resolve_reason(found)
        line += f": {reason}" if reason else ""
    return line


def _resolve_reason(found: Inspection) -> str | None:
    """Why the effect was last resolved, in the resolver's words (its ``EFFECT_RESOLVED``
    event), when they gave a reason."""
    resolved = [
        e
        for e in found.events
        if e.type is EventType.EFFECT_RESOLVED and e.effect_key == found.effect_key
    ]
    reason = resolved[-1].data.get("reason") if resolved else None
    return None if reason is None else str(reason)


def _receipt_lines(found: Inspection) -> list[tuple[str, str]]:
    lines = []
    for receipt in found.receipts:
        document = read_document(receipt)
        seq = place(receipt.partition, receipt.seq)
        if isinstance(document, str):
            lines.append(("receipt", f"seq {seq}  UNREADABLE  {receipt.receipt_id}  {document}"))
            continue
        lines.append(
            (
                "receipt",
                f"seq {seq}  {document.get('result')}  {receipt.receipt_id}"
                f"  finished {document.get('finished_at')}",
            )
        )
        if document.get("error"):
            lines.append(("error", str(document["error"])))
        if isinstance(document.get("budget"), dict):
            lines.append(("budget", _budget_line(document["budget"])))
    if not lines:
        lines.append(("receipt", _no_receipt(found)))
    return lines


def _budget_line(budget: dict[str, Any]) -> str:
    """The charge a receipt recorded (the store's before/after, never the agent's text)."""
    start = budget.get("window_start")
    with suppress(ValueError):  # else shown as stored: the chain verifier judges the document
        start = display_instant(decode_instant(str(start)))
    return (
        f"{budget.get('budget_id')}: spent {budget.get('spent_before')} ->"
        f" {budget.get('spent_after')} of {budget.get('limit')} ({budget.get('window')} window"
        f" from {start})"
    )


def _no_receipt(found: Inspection) -> str:
    pending = [a for a in found.approvals if a.status is ApprovalStatus.PENDING]
    if pending:
        hint = command_line("ctrlrun", "approve", pending[-1].approval_id)
        return f"none yet: awaiting a human (`{hint}`)"
    effect = found.effect
    if effect is not None and effect.action_id == found.action_id:
        if effect.lease_expired(utc_now()):
            return "none: its lease lapsed without an outcome; the next attempt records AMBIGUOUS"
        return f"none yet: in flight (effect {effect.state})"
    return "none"


def header_lines(found: Inspection) -> list[tuple[str, str]]:
    """The key/value block above the timeline."""
    action = found.action or {}
    now = utc_now()
    lines = [
        ("action", found.action_id),
        ("name", str(action.get("name") or "-")),
        ("principal", who(action.get("principal"))),
        ("arguments", _arguments_line(action)),
        ("resource", str(action.get("resource") or "-")),
        ("environment", str(action.get("environment") or "-")),
        ("hash", found.action_hash or "-"),
        ("decision", _decision_line(found.decision)),
    ]
    answers = answers_given(found.events)
    lines += [
        (
            "approval",
            f"{a.approval_id}  {shown_status(a, now, found.reasons.get(a.approval_id))}"
            f"  expires {when(a.expires_at)}",
        )
        for a in found.approvals
    ]
    lines += [
        ("answers", answers_line(answers[a.approval_id]))
        for a in found.approvals
        if any(x["reason"] for x in answers.get(a.approval_id, []))
    ]
    lines.append(("effect", _effect_line(found)))
    if found.key_template is not None:
        lines.append(("template", _template_line(found.key_template)))
    return lines + _receipt_lines(found)


def _arguments_line(action: Mapping[str, Any]) -> str:
    """The arguments whole, money as the policy file's ``display:`` shows it (when it loads)."""
    arguments = action.get("arguments", {})
    policy = display_policy()
    entry = policy.entry(str(action.get("name"))) if policy is not None else None
    if entry is None or not isinstance(arguments, dict):
        return compact(arguments)
    return shown_compact(arguments, shown_arguments(arguments, entry.displays))


def event_row(event: Event) -> tuple[str, ...]:
    """``id  ts  TYPE  k=v …`` (the proposed action itself is in the block above)."""
    pairs = {"approval_id": event.approval_id, "effect_key": event.effect_key}
    pairs.update({k: v for k, v in event.data.items() if k != "action"})
    text = " ".join(
        f"{k}={v if isinstance(v, str) else compact(v)}" for k, v in pairs.items() if v is not None
    )
    return (str(event.event_id), when(event.ts), str(event.type), text)


@click.command()
@click.argument("action_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
@store_url_option
def inspect(action_id: str, as_json: bool, store_url: str | None) -> None:
    """Everything about ACTION_ID: the action, the decision, its approvals, its effect, its
    receipt(s) and the event timeline.

    An approval id (apr_…) stands for the action that requested it. An id the store does
    not know is refused (exit 1) with nothing on stdout.
    """
    with existing_store(store_url) as store:
        found = gather(store, action_id)
    if as_json:
        json_line(inspection_json(found))
        return
    table(header_lines(found))
    click.echo("")
    click.echo("events")
    table([("", *event_row(e)) for e in found.events], color_column=None)
