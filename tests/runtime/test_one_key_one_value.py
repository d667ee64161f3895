"""Typed effect-key placeholders on real calls, both stores, sync and async (decision 0026):
an integer given to a text placeholder is refused before anything runs; ``:int`` keys exactly
what the untyped template keyed, so the store's template memory sees no change and a call
repeated across the upgrade is still a duplicate."""

from __future__ import annotations

import asyncio

import pytest

import ctrlrun
from ctrlrun import AlreadyCommitted, Control, DenyReason, EffectKeyError
from ctrlrun.config import load_policy_text
from ctrlrun.errors import PolicyError
from ctrlrun.store.templates import effect_templates

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  shop.refund:
    decision: allow
    effect: "{template}"
"""


def control(store, clock, template):
    return Control(load_policy_text(POLICY.format(template=template)), store, clock=clock)


def refund_on(ctl, ran, kind):
    if kind == "sync":

        @ctrlrun.protect("shop.refund", control=ctl)
        def refund(order: object, note: str = "-"):
            ran.append(order)
            return "ok"

        return refund

    @ctrlrun.protect("shop.refund", control=ctl)
    async def arefund(order: object, note: str = "-"):
        ran.append(order)
        return "ok"

    return lambda *a, **k: asyncio.run(arefund(*a, **k))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_integer_for_a_text_placeholder_is_refused_and_nothing_runs(store, clock, kind):
    ran: list = []
    refund = refund_on(control(store, clock, "refund:{order}"), ran, kind)
    with ctrlrun.context("bot"):
        assert refund("5") == "ok"
        with pytest.raises(EffectKeyError) as refused:
            refund(5)  # was refund:5 too: refused as a duplicate of "5"
    assert refused.value.reason is DenyReason.EFFECT_KEY_ERROR
    assert "{order:int}" in str(refused.value)
    assert ran == ["5"]
    assert [r["result"] for r in store.receipts()] == ["committed", "denied"]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_value_hiding_its_separator_is_refused(store, clock, kind):
    ran: list = []
    refund = refund_on(control(store, clock, "refund:{order}:{note}"), ran, kind)
    with ctrlrun.context("bot"):
        assert refund("1", note="2:3") == "ok"
        with pytest.raises(EffectKeyError) as refused:
            refund("1:2", note="3")  # would be refund:1:2:3, the key of the first call
    assert refused.value.placeholder == "order"
    assert ran == ["1"]


def test_adding_int_keeps_every_key_and_is_no_template_change(store, clock):
    """The upgrade path: keys reserved under ``{order}`` with integers (before decision 0026)
    are the keys ``{order:int}`` renders; the memory remembers the shape, so no operator
    acceptance is needed and a repeated call is still refused as a duplicate."""
    ran: list = []
    with ctrlrun.context("bot"):
        typed = refund_on(control(store, clock, "refund:{order:int}"), ran, "sync")
        assert typed(5) == "ok"
        [remembered] = effect_templates(store)
        assert remembered.template == "refund:{order}"
        with pytest.raises(AlreadyCommitted):
            typed(5)
        text = refund_on(control(store, clock, "refund:{order}"), ran, "sync")
        with pytest.raises(AlreadyCommitted):
            text("5")  # the same key: at most once holds across the edit
    assert ran == [5]


def test_the_loader_names_a_template_with_touching_placeholders(tmp_path):
    from ctrlrun.config import load_policy_file

    path = tmp_path / "ctrlrun.yaml"
    path.write_text(POLICY.format(template="k:{a}{b}"))
    with pytest.raises(PolicyError) as refused:
        load_policy_file(path)
    assert refused.value.line == 5 and refused.value.key == "actions.shop.refund.effect"
    assert "'k:{a}{b}'" in str(refused.value) and str(path) in str(refused.value)


def test_protect_refuses_it_at_decoration(store, clock):
    ctl = control(store, clock, "refund:{order}")
    with pytest.raises(ctrlrun.InvalidArgument, match="touch"):

        @ctrlrun.protect("shop.refund", control=ctl, effect="k:{order}{note}")
        def refund(order: str, note: str):
            return order
