"""``@protect`` binds arguments without ``Signature.bind`` on the common shapes; every shape
must come out exactly as ``bind`` + ``apply_defaults`` would, and every error as its TypeError."""

from __future__ import annotations

import inspect

import pytest

from ctrlrun.runtime.protect import _binder


def f(a, b=2, *, c, d="x"):
    return a, b, c, d


def reference(args, kwargs):
    bound = inspect.signature(f).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1,), {"c": 3}),
        ((1, 5), {"c": 3, "d": "y"}),
        ((), {"a": 1, "c": 3}),
        ((), {"c": 3, "a": 1, "b": None}),
    ],
)
def test_bound_like_signature_bind(args, kwargs):
    assert _binder(inspect.signature(f))(args, kwargs) == reference(args, kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {"c": 3}),  # a missing
        ((1,), {}),  # c missing
        ((1, 2, 3), {"c": 3}),  # too many positional
        ((1,), {"a": 1, "c": 3}),  # a twice
        ((1,), {"c": 3, "e": 0}),  # unknown name
    ],
)
def test_errors_are_signature_bind_s(args, kwargs):
    with pytest.raises(TypeError) as expected:
        reference(args, kwargs)
    with pytest.raises(TypeError) as got:
        _binder(inspect.signature(f))(args, kwargs)
    assert str(got.value) == str(expected.value)
