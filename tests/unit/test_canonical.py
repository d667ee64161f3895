"""Canonical JSON: the one form every hash is taken over."""

from __future__ import annotations

import math
import pickle
from collections import OrderedDict
from decimal import Decimal
from enum import IntEnum, StrEnum
from types import MappingProxyType

import pytest

from ctrlrun.canonical import GENESIS_HASH, canonical_bytes, canonical_text, digest, new_id
from ctrlrun.errors import InvalidArgument


class TestCanonicalForm:
    def test_keys_are_sorted_and_there_is_no_whitespace(self):
        assert canonical_bytes({"b": 1, "a": [1, 2], "c": {"z": None, "y": True}}) == (
            b'{"a":[1,2],"b":1,"c":{"y":true,"z":null}}'
        )

    def test_non_ascii_is_raw_utf8_and_not_normalised(self):
        nfc, nfd = "caf\u00e9", "cafe\u0301"
        assert canonical_bytes(nfc) == '"café"'.encode()
        assert canonical_bytes(nfc) != canonical_bytes(nfd)

    def test_tuples_and_lists_are_the_same_value(self):
        assert canonical_bytes({"a": (1, (2, 3))}) == canonical_bytes({"a": [1, [2, 3]]})

    def test_insertion_order_never_matters(self):
        assert canonical_bytes(OrderedDict([("b", 1), ("a", 2)])) == canonical_bytes(
            {"a": 2, "b": 1}
        )

    def test_read_only_mappings_are_accepted(self):
        assert canonical_bytes(MappingProxyType({"a": 1})) == b'{"a":1}'

    def test_true_and_one_differ(self):
        assert canonical_bytes(True) != canonical_bytes(1)

    def test_enum_members_render_by_value(self):
        class Colour(StrEnum):
            RED = "red"

        class Size(IntEnum):
            BIG = 3

        assert canonical_bytes({"c": Colour.RED, "s": Size.BIG}) == b'{"c":"red","s":3}'

    def test_text_helper_is_the_same_bytes(self):
        assert canonical_text({"a": "é"}).encode() == canonical_bytes({"a": "é"})


class TestRefusals:
    @pytest.mark.parametrize(
        ("value", "where"),
        [
            (1.5, "$"),
            ({"a": [1, {"b": 2.0}]}, "$.a[1].b"),
            (math.nan, "$"),
            (float("inf"), "$"),
        ],
    )
    def test_float_is_refused_at_any_depth_naming_the_path(self, value, where):
        with pytest.raises(InvalidArgument, match="float") as caught:
            canonical_bytes(value)
        assert caught.value.path == where

    @pytest.mark.parametrize("value", [{1: "a"}, {("a",): 1}, {None: 1}])
    def test_non_string_keys_are_refused(self, value):
        with pytest.raises(InvalidArgument, match="keys must be str"):
            canonical_bytes(value)

    @pytest.mark.parametrize("value", [Decimal("1.5"), {1, 2}, b"x", object(), 1j])
    def test_other_types_are_refused(self, value):
        with pytest.raises(InvalidArgument, match="no canonical JSON form"):
            canonical_bytes(value)

    def test_a_lone_surrogate_is_refused_with_its_path(self):
        with pytest.raises(InvalidArgument, match=r"\$\.a\[1\].*lone surrogate"):
            canonical_bytes({"a": ["ok", "\udc00"]})

    def test_a_lone_surrogate_in_a_key_is_refused(self):
        with pytest.raises(InvalidArgument, match="lone surrogate"):
            canonical_bytes({"\ud800": 1})


class TestDigestsAndIds:
    def test_digest_is_sha256_of_the_canonical_bytes(self):
        assert (
            digest({}) == "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        )

    def test_genesis_is_all_zero(self):
        assert GENESIS_HASH == "sha256:" + "0" * 64

    def test_ids_are_prefixed_128_bit_hex_and_fresh(self):
        first, second = new_id("act"), new_id("act")
        assert first.startswith("act_") and len(first) == 4 + 32
        int(first[4:], 16)
        assert first != second


def test_refusals_survive_pickling():
    with pytest.raises(InvalidArgument) as caught:
        canonical_bytes(1.0)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is InvalidArgument and copy.path == "$" and str(copy) == str(caught.value)
