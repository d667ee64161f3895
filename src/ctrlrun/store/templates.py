"""An operator's side of effect-template memory: see which template each action's keys are
reserved under, and accept a change (``ctrlrun policy templates`` / ``policy accept``)."""

from __future__ import annotations

from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.action import check_action_name
from ctrlrun.kernel.template import Template
from ctrlrun.kernel.text import check_label
from ctrlrun.store.ops.templates import (
    KeyTemplate,
    accept_key_template_in_txn,
    key_templates_in_txn,
)
from ctrlrun.store.protocol import StateStore

__all__ = ["KeyTemplate", "accept_effect_template", "effect_templates"]


def effect_templates(store: StateStore, action: str | None = None) -> tuple[KeyTemplate, ...]:
    """Every action's remembered effect-key template (by name), or ``action``'s alone."""
    return store.read(lambda txn: key_templates_in_txn(txn, action))


def accept_effect_template(store: StateStore, action: str, template: str, *, by: str) -> str | None:
    """Make ``template`` the one ``action``'s keys are reserved under from now on, recorded
    with an ``EFFECT_TEMPLATE_ACCEPTED`` event naming ``by``; return the template it replaced
    (None if none was remembered). ``InvalidArgument`` for a bad name or template, or one that
    is already the remembered one (nothing is written). The template's shape is remembered:
    its ``:int`` types change no key (decision 0026)."""
    check_action_name(action)
    template = Template.parse(template).shape
    check_label(by, "by")
    current = effect_templates(store, action)
    if current and current[0].template == template:
        raise InvalidArgument(f"{action}: {template!r} is already its effect-key template")
    return store.transact(lambda txn: accept_key_template_in_txn(txn, action, template, by))
