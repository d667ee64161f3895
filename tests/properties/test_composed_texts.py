"""The hot path composes canonical texts from parts; each must equal the validating encoder's.

``Action``'s canonical bytes and ``stored_text``, a ``ReceiptDraft``'s linked text and an
event's data are built without re-walking the values they were built from; for any input,
the bytes must be exactly the ones ``canonical_text`` (or the event encoder) would write.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctrlrun.canonical import canonical_text, sha256_hex
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.evidence_text import attempt_data, event_data_json, result_json
from ctrlrun.kernel.receipt import ChainHead, ReceiptDraft, chain_receipt, draft_in_partition
from ctrlrun.runtime.receipts import proposed

settings.register_profile("ctrlrun", derandomize=True, max_examples=200, deadline=None)
settings.load_profile("ctrlrun")

# Unicode text without lone surrogates (those are refused, tested below), including
# control characters, DEL, the line separators and astral characters.
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
# names a person can read (kernel/text.py): no control, format or separator characters, no
# surrounding whitespace
names = st.text(
    st.characters(exclude_categories=("Cs", "Cc", "Cf", "Zl", "Zp")), min_size=1, max_size=8
).filter(lambda text: text == text.strip())
values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=12,
)


def one_line(text: str) -> bool:
    return bool(text.strip()) and "\n" not in text and "\r" not in text


@given(
    st.dictionaries(texts, values, max_size=4),
    names.filter(one_line),
    st.none() | names.filter(one_line),
    st.none() | names.filter(one_line),
    names.filter(one_line),
)
def test_an_action_s_composed_texts_equal_the_encoder_s(arguments, agent, user, resource, env):
    action = Action("p.q", arguments, Principal(agent, user), resource=resource, environment=env)
    document = {
        "arguments": arguments,
        "environment": env,
        "name": "p.q",
        "principal": {"agent": agent, "user": user},
        "resource": resource,
        "schema": "ctrlrun.action/v1",
    }
    assert action.canonical == canonical_text(document).encode()
    assert action.action_hash == sha256_hex(canonical_text(document).encode())
    assert action.stored_text == canonical_text(action.to_dict())
    assert action.principal.text == canonical_text(action.principal.to_dict())


@given(st.dictionaries(texts, values, max_size=8), st.integers(0, 2**40), texts)
def test_a_receipt_draft_links_to_the_encoder_s_bytes(fields, seq, prev):
    fields.pop("seq", None)
    fields.pop("prev_hash", None)
    texts_ = {key: canonical_text(value) for key, value in list(fields.items())[:2]}
    draft = ReceiptDraft(fields, texts_)
    head = ChainHead(seq, prev)
    expected = canonical_text({**fields, "seq": seq + 1, "prev_hash": prev})
    assert chain_receipt(draft, head) == (seq + 1, expected, sha256_hex(expected.encode()))
    assert dict(draft) == fields and len(draft) == len(fields)


# keys around "partition" in canonical order, so the field lands first, last or between
near_partition = st.sampled_from(["pa", "partitio", "partitions", "payload", "policy_hash", "z"])


@given(
    st.dictionaries(texts | near_partition, values, max_size=8),
    st.integers(1, 4095),
    st.integers(0, 2**40),
    texts,
)
@example({}, 1, 0, "")
@example({"policy_hash": "h"}, 7, 0, "")
def test_a_draft_in_a_partition_links_to_the_encoder_s_bytes(fields, partition, seq, prev):
    for key in ("seq", "prev_hash", "partition"):
        fields.pop(key, None)
    texts_ = {key: canonical_text(value) for key, value in list(fields.items())[:2]}
    draft = draft_in_partition(ReceiptDraft(fields, texts_), partition)
    expected = canonical_text({**fields, "partition": partition, "seq": seq + 1, "prev_hash": prev})
    assert chain_receipt(draft, ChainHead(seq, prev))[1] == expected
    assert dict(draft) == {**fields, "partition": partition}


def test_a_draft_that_already_holds_a_link_key_is_encoded_whole():
    draft = ReceiptDraft({"seq": 9, "a": 1}, {})
    assert chain_receipt(draft, ChainHead(1, "h"))[1] == '{"a":1,"prev_hash":"h","seq":2}'


def test_a_draft_refuses_a_float_and_a_lone_surrogate_like_the_encoder():
    with pytest.raises(InvalidArgument):
        ReceiptDraft({"a": 1.5}, {})
    draft = ReceiptDraft({"a": "\ud800"}, {})
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        chain_receipt(draft, ChainHead(0, "h"))


def test_a_lone_surrogate_in_an_action_is_refused_by_path():
    with pytest.raises(InvalidArgument, match=r"\$\.principal\.agent"):
        Action("p.q", {}, Principal("a\ud800"))


@given(st.dictionaries(texts, values, max_size=4))
def test_event_data_is_the_ascii_sorted_encoding(data):
    assert event_data_json(data) == json.dumps(data, sort_keys=True, separators=(",", ":"))


@given(st.dictionaries(texts, values, max_size=4), names.filter(one_line), st.none() | texts)
@example({"del": "\x7f", "tab": "\t"}, "a", None)  # ASCII, but the event encoder escapes DEL
@example({"e": "é"}, "a", None)
@example({"n": 1}, "a", "r")
def test_a_proposed_event_s_data_is_the_encoder_s_bytes(arguments, agent, resource):
    resource = resource if resource and one_line(resource) and resource.isprintable() else None
    action = Action("p.q", arguments, Principal(agent), resource=resource)
    data = proposed(action).data
    plain = json.loads(json.dumps(data))  # the same values, no text carried
    assert event_data_json(data) == json.dumps(plain, sort_keys=True, separators=(",", ":"))


@given(st.none() | st.integers(0, 2**40))
def test_an_attempt_s_shared_event_data_is_its_encoding(attempt):
    data = attempt_data(attempt)
    assert dict(data) == {"attempt": attempt}
    assert data.text == json.dumps({"attempt": attempt}, sort_keys=True, separators=(",", ":"))
    assert event_data_json(data) == data.text and attempt_data(attempt) is data  # encoded once


@given(texts | values)
def test_a_result_s_text_is_the_canonical_encoder_s(value):
    # a str result takes a shortcut when it is ASCII; any other value the validating encoder
    expected = None if value is None else canonical_text(value)
    assert result_json(value) == expected


def test_event_data_with_a_cycle_is_refused_as_the_full_encoder_refuses_it():
    data: dict[str, object] = {}
    data["self"] = data
    with pytest.raises(ValueError, match="Circular reference"):
        event_data_json(data)


def test_event_data_of_any_mapping_and_odd_values():
    from types import MappingProxyType

    assert event_data_json({"b": 1, "a": "é"}) == '{"a":"\\u00e9","b":1}'
    proxy = MappingProxyType({"b": 1})  # not a dict: the full encoder, as before
    full = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr)
    assert event_data_json(proxy) == full.encode(proxy)
    assert event_data_json({"x": frozenset(), "n": float("nan")}) == ('{"n":NaN,"x":"frozenset()"}')


def test_plain_text_refuses_what_is_not_plain():
    from ctrlrun.canonical import plain_text

    with pytest.raises(TypeError, match="not JSON serializable"):
        plain_text({"a": object()})


@given(st.dictionaries(texts, values, max_size=5))
def test_an_action_s_private_arguments_are_its_canonical_text_parsed(arguments):
    action = Action("p.q", arguments, Principal("a"))
    parsed = json.loads(action.arguments_text)
    for copy in (action.plain_arguments, action.arguments):
        assert copy == parsed and list(copy) == list(parsed)  # same values, canonical order
    fresh = action.arguments
    assert fresh is not action.plain_arguments
    fresh["injected"] = 1
    assert "injected" not in action.arguments and "injected" not in action.plain_arguments
    arguments["later"] = 1  # the caller's dict is not shared either
    assert "later" not in action.plain_arguments
