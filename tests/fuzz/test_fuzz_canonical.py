"""Canonical form and hashing under arbitrary Python values: a canonical text and a stable
``sha256:`` digest, or ``InvalidArgument`` naming a path; nothing else, never a hang."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from ctrlrun.canonical import MAX_DEPTH, canonical_bytes, canonical_text, digest, is_plain, plain
from ctrlrun.errors import InvalidArgument
from support.fuzzing import budget

LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**600, max_value=10**700)
    | st.floats(allow_nan=True)
    | st.text()
    | st.binary(max_size=8)
    | st.sampled_from(["\ud800", "a\udfff", "\u2028", "\x00"])  # lone surrogates, separators
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=4)
        | st.frozensets(st.integers(), max_size=3)
    ),
    max_leaves=12,
)


def nest(value, depth):
    for _ in range(depth):
        value = [value]
    return value


@budget(150)
@given(VALUES)
def test_a_value_has_one_canonical_text_or_a_typed_refusal(value):
    try:
        text = canonical_text(value)
    except InvalidArgument as refused:
        assert str(refused).startswith("$"), refused  # names the path
        assert not is_plain(value) or "lone surrogate" in str(refused)  # is_plain skips those
        return
    assert canonical_bytes(value) == text.encode("utf-8")
    again = json.loads(text)
    assert canonical_text(again) == text  # a fixed point: parse and encode gives the same
    assert digest(again) == digest(value)
    assert plain(value) == again


@budget(50)
@given(st.integers(0, MAX_DEPTH + 40), st.sampled_from([1, "x", 1.5, None]))
def test_depth_is_refused_past_the_limit_only(depth, leaf):
    value = nest(leaf, depth)
    if (isinstance(leaf, float) and not math.isnan(leaf)) or depth > MAX_DEPTH:
        try:
            canonical_text(value)
        except InvalidArgument:
            return
        raise AssertionError("accepted")
    assert json.loads(canonical_text(value)) == value


def test_a_cycle_is_refused_not_a_recursion_error():
    loop: list = []
    loop.append(loop)
    cyclic: dict = {}
    cyclic["self"] = cyclic
    for value in (loop, cyclic):
        try:
            canonical_text(value)
        except InvalidArgument as refused:
            assert "cycle" in str(refused)
        else:
            raise AssertionError("accepted a cycle")
