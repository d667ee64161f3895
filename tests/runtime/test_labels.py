"""Principal names, resources and effect keys an agent supplies: refused when a person could
not read them faithfully (control, format and separator characters; surrounding whitespace),
before anything is written, on both stores. Look-alikes stay distinct keys (exact code points).
"""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import InvalidArgument, Principal
from ctrlrun.kernel.action import Action

HOSTILE = [
    "bot\u202egnp.exe",  # right-to-left override (Cf)
    "bot\u200b",  # zero-width space (Cf)
    "bot\nsecond line",  # a newline that would forge a row (Cc)
    "bot\x1b[2J",  # an escape sequence (Cc)
    "bot\u2028x",  # line separator (Zl)
    "bot\u2029x",  # paragraph separator (Zp)
    " bot",  # leading whitespace
    "bot\t",  # trailing whitespace
]


@pytest.mark.parametrize("value", HOSTILE)
def test_principal_names_refuse_what_a_person_cannot_see(value):
    with pytest.raises(InvalidArgument):
        Principal(value)
    with pytest.raises(InvalidArgument):
        Principal("bot", value)
    with pytest.raises(InvalidArgument), ctrlrun.context(value):
        pass


@pytest.mark.parametrize("value", HOSTILE)
def test_resources_refuse_it_too(value):
    with pytest.raises(InvalidArgument):
        Action("crm.read", {}, Principal("bot"), resource=value)


def test_printable_non_ascii_names_are_kept_exactly():
    assert Principal("agent-ünïcode", "José Ñandú").user == "José Ñandú"
    assert Action("crm.read", {}, Principal("bot"), resource="bücher: 1").resource == "bücher: 1"


# a leading space inside a key ("refund: bot") is visible between the prefix and the value
@pytest.mark.parametrize("value", [v for v in HOSTILE if v != " bot"])
def test_an_effect_key_rendered_from_hostile_arguments_writes_nothing(control, store, value):
    ran = []

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        ran.append(payment_id)

    with ctrlrun.context("bot"), pytest.raises(InvalidArgument, match="effect key"):
        refund(value, 5)
    assert ran == [] and store.receipts() == () and store.get_effect(f"refund:{value}") is None


def test_an_explicit_effect_key_is_checked_the_same_way(control, store):
    action = Action("crm.read", {"customer": "c1"}, Principal("bot"))
    with pytest.raises(InvalidArgument, match="effect_key"):
        control.execute(action, lambda **_: None, effect_key="k\u202e")
    assert store.receipts() == ()


def test_look_alike_values_make_different_keys(control, store):
    """Keys are exact code points (seed 001): the two spellings of "é" are two refunds."""

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int):
        return payment_id

    composed, decomposed = "pay_caf\u00e9", "pay_cafe\u0301"
    with ctrlrun.context("bot"):
        refund(composed, 5)
        refund(decomposed, 5)
    assert store.get_effect(f"refund:{composed}") is not None
    assert store.get_effect(f"refund:{decomposed}") is not None
