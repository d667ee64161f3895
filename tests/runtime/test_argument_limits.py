"""Arguments that cannot be canonical within the documented limits are refused with
``InvalidArgument`` before anything is written, never a RecursionError or ValueError."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import Control, InvalidArgument
from ctrlrun.canonical import MAX_DEPTH, MAX_INT_DIGITS, canonical_text
from ctrlrun.config import load_policy_text
from support.policies import POLICY


def nested(depth):
    value = {"leaf": 1}
    for _ in range(depth):
        value = {"n": value}
    return value


def cycle():
    loop = []
    loop.append(loop)
    return loop


def very_deep():
    value = []
    for _ in range(10_000):
        value = [value]
    return value


BAD = {
    "too deep": nested(MAX_DEPTH + 1),
    "a cycle": cycle(),
    "far too deep": very_deep(),
    "an integer over the digit limit": 10**MAX_INT_DIGITS,
    "a negative one": -(10**MAX_INT_DIGITS),
    "one inside a list": [1, 10 ** (MAX_INT_DIGITS + 50)],
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_argument_is_refused_before_anything_is_written(control, store, name):
    ran = []

    @ctrlrun.protect("email.send", control=control)
    def send(to: str, body):
        ran.append(to)

    with ctrlrun.context("bot"), pytest.raises(InvalidArgument):
        send("ops@example.com", BAD[name])
    assert ran == [] and store.receipts() == ()


def test_the_limits_themselves_are_accepted():
    assert canonical_text(nested(MAX_DEPTH - 1)).count("{") == MAX_DEPTH
    assert len(canonical_text(10**MAX_INT_DIGITS - 1)) == MAX_INT_DIGITS


def test_a_call_over_the_size_limit_is_refused_and_the_limit_is_configurable(store, clock):
    control = Control(load_policy_text(POLICY), store, clock=clock, max_argument_bytes=1000)

    @ctrlrun.protect("email.send", control=control)
    def send(to: str, body: str):
        return len(body)

    with ctrlrun.context("bot"):
        assert send("ops@example.com", "é" * 400) == 400  # 800 bytes of text: under
        with pytest.raises(InvalidArgument, match="exceed the limit of 1000") as refused:
            send("ops@example.com", "é" * 500)  # 1,000 bytes of text plus the rest: over
    assert refused.value.limit == 1000 and refused.value.size > 1000
    assert len(store.receipts()) == 1


def test_the_default_limit_is_one_mebibyte(control, store):
    @ctrlrun.protect("email.send", control=control)
    def send(to: str, body: str):
        return "sent"

    with ctrlrun.context("bot"), pytest.raises(InvalidArgument, match="1048576"):
        send("ops@example.com", "x" * (1 << 20))
    assert store.receipts() == ()


def test_bad_limits_are_refused(store):
    with pytest.raises(InvalidArgument):
        Control(load_policy_text(POLICY), store, max_argument_bytes=0)
    with pytest.raises(InvalidArgument):
        Control(load_policy_text(POLICY), store, async_workers=0)
