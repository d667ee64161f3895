"""The effect-key template each action's keys are reserved under, inside a transaction.

A different key for the same effect is a second run of it, so the store remembers, per
action, the template its keys were rendered from: the first reservation records it, a call
rendering that action's key from another template is refused (``EffectTemplateChanged``) and
an operator's ``accept`` replaces it, with an ``EFFECT_TEMPLATE_ACCEPTED`` event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ctrlrun.errors import EffectTemplateChanged
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.store.ops import Txn
from ctrlrun.store.ops.evidence import append_events_in_txn


@dataclass(frozen=True, slots=True)
class KeyTemplate:
    """The template an action's effect keys are reserved under; ``accepted_by`` is None when
    a call recorded it, the operator when one accepted it."""

    action: str
    template: str
    recorded_at: datetime
    accepted_by: str | None


def check_key_template_in_txn(txn: Txn, action: str, template: str) -> None:
    """Record ``template`` for ``action`` if none is; raise ``EffectTemplateChanged`` if
    another one is (nothing written)."""
    row = txn.one("effect_template_get", {"action": action})
    if row is None:
        recorded = {"action": action, "template": template, "recorded_at": txn.ts(txn.now)}
        if txn.run("effect_template_insert", recorded) == 1:
            return
        row = txn.one("effect_template_get", {"action": action})  # a concurrent first record
    if row is not None and row["template"] != template:
        raise EffectTemplateChanged(
            f"{action}: its effect keys are reserved under the template"
            f" {row['template']!r}, and this call renders its key from {template!r}; a"
            " different key could run the same effect twice, so it is refused until an"
            f" operator accepts the change (ctrlrun policy accept {action} …)",
            action=action,
            remembered=str(row["template"]),
            presented=template,
        )


def accept_key_template_in_txn(txn: Txn, action: str, template: str, by: str) -> str | None:
    """Make ``template`` the one ``action``'s keys are reserved under; return the one it
    replaces (None if there was none). Appends ``EFFECT_TEMPLATE_ACCEPTED``."""
    row = txn.one("effect_template_get", {"action": action})
    previous = None if row is None else str(row["template"])
    params = {
        "action": action,
        "template": template,
        "recorded_at": txn.ts(txn.now),
        "accepted_by": by,
    }
    txn.run("effect_template_accept", params)
    data = {"action": action, "from": previous, "to": template, "by": by}
    append_events_in_txn(txn, [EventDraft(EventType.EFFECT_TEMPLATE_ACCEPTED, None, data=data)])
    return previous


def key_templates_in_txn(txn: Txn, action: str | None = None) -> tuple[KeyTemplate, ...]:
    """Every remembered template (by action name), or ``action``'s alone."""
    rows = (
        txn.all("effect_template_list", {})
        if action is None
        else txn.all("effect_template_get", {"action": action})
    )
    return tuple(
        KeyTemplate(
            str(r["action"]), str(r["template"]), txn.read_ts(r["recorded_at"]), r["accepted_by"]
        )
        for r in rows
    )
