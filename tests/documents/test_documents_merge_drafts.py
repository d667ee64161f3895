"""The json-object merge, and drafts on disk."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctrlrun.documents.drafts import DraftBox
from ctrlrun.documents.merge import merge_for, merge_json_objects
from ctrlrun.errors import InvalidArgument, MergeConflict


@pytest.mark.parametrize(
    ("base", "mine", "theirs", "merged"),
    [
        ({"a": 1, "b": 1}, {"a": 2, "b": 1}, {"a": 1, "b": 3}, {"a": 2, "b": 3}),
        ({"a": 1}, {"a": 1, "new": 1}, {"a": 1, "other": 2}, {"a": 1, "new": 1, "other": 2}),
        ({"a": 1, "b": 1}, {"b": 1}, {"a": 1, "b": 2}, {"b": 2}),  # deleted here, kept there
        ({"a": 1}, {"a": 5}, {"a": 5}, {"a": 5}),  # the same change on both sides
        ({"a": 1}, {}, {}, {}),  # deleted on both sides
        ({"a": {"x": 1}}, {"a": {"x": 2}}, {"a": {"x": 1}}, {"a": {"x": 2}}),  # values whole
    ],
)
def test_merge_by_key(base, mine, theirs, merged):
    assert merge_json_objects(base, mine, theirs) == merged


@pytest.mark.parametrize(
    ("base", "mine", "theirs", "keys"),
    [
        ({"a": 1}, {"a": 2}, {"a": 3}, ("a",)),
        ({"a": 1}, {}, {"a": 3}, ("a",)),  # deleted here, changed there
        ({}, {"n": 1}, {"n": 2}, ("n",)),  # added differently on both sides
        ({"a": {"x": 1}}, {"a": {"x": 2}}, {"a": {"y": 1}}, ("a",)),
        ({"a": 1, "b": 1}, {"a": 2, "b": 2}, {"a": 3, "b": 3}, ("a", "b")),
    ],
)
def test_keys_both_sides_changed_differently_are_a_conflict(base, mine, theirs, keys):
    with pytest.raises(MergeConflict) as caught:
        merge_json_objects(base, mine, theirs)
    assert caught.value.keys == keys


def test_only_objects_merge_and_only_json_object_kinds():
    with pytest.raises(InvalidArgument):
        merge_json_objects({}, [], {})
    assert merge_for("json-object") is merge_json_objects
    assert merge_for("json") is None and merge_for("sheet") is None


objects = st.dictionaries(st.sampled_from("abcde"), st.integers(0, 3), max_size=5)


@settings(max_examples=150, derandomize=True)
@given(base=objects, mine=objects, theirs=objects)
def test_merge_properties(base, mine, theirs):
    assert merge_json_objects(base, mine, base) == mine  # nothing changed there
    assert merge_json_objects(base, base, theirs) == theirs  # nothing changed here
    assert merge_json_objects(base, mine, mine) == mine
    try:
        merged = merge_json_objects(base, mine, theirs)
    except MergeConflict as exc:
        with pytest.raises(MergeConflict) as mirrored:
            merge_json_objects(base, theirs, mine)
        assert mirrored.value.keys == exc.keys
        return
    assert merged == merge_json_objects(base, theirs, mine)  # symmetric
    for key in {*base, *mine, *theirs}:  # every change of either side survives
        if mine.get(key, "absent") != base.get(key, "absent"):
            assert merged.get(key, "absent") == mine.get(key, "absent")
        if theirs.get(key, "absent") != base.get(key, "absent"):
            assert merged.get(key, "absent") == theirs.get(key, "absent")


def box(root, writer="w1", user="alice"):
    return DraftBox(root, user=user, doc_id="doc", writer_id=writer)


def test_a_draft_write_replaces_atomically_and_leftovers_are_ignored(tmp_path):
    mine = box(tmp_path)
    mine.write(base_version=1, base_content={}, content={"n": 1})
    # what a process killed mid-write leaves: a temporary file, never a torn draft
    (mine.folder / ".w1.deadbeef.tmp").write_bytes(b'{"format": "ctrlrun.draft/v1", "cont')
    mine.write(base_version=1, base_content={}, content={"n": 2})
    assert mine.own().content == {"n": 2}
    assert box(tmp_path, "w2").siblings()[0].content == {"n": 2}
    assert len(box(tmp_path, "w2").siblings()) == 1


def test_unreadable_drafts_are_skipped_and_kept(tmp_path, caplog):
    mine = box(tmp_path)
    mine.write(base_version=1, base_content={}, content=1)
    broken = mine.folder / "w9.json"
    broken.write_text("{not json")
    (mine.folder / "w8.json").write_text('{"format": "someone.else/v3"}')
    assert [d.writer_id for d in box(tmp_path, "w2").siblings()] == ["w1"]
    assert broken.exists() and "unreadable draft" in caplog.text


def test_set_aside_and_discard(tmp_path):
    mine = box(tmp_path)
    assert mine.set_aside("x") is None
    mine.write(base_version=3, base_content={"a": 1}, content={"a": 2})
    aside = mine.set_aside("mine")
    assert aside.name.startswith("w1~mine-") and mine.own() is None
    [draft] = mine.siblings()
    assert (draft.set_aside, draft.base_version, draft.base_content) == (True, 3, {"a": 1})
    with pytest.raises(ValueError, match="not a sibling"):
        box(tmp_path, user="bob").discard(draft)
    mine.discard(draft)
    assert mine.siblings() == ()
    mine.delete()  # nothing there: fine


@pytest.mark.parametrize("bad", ["", "a/b", "..", "w~1", "x" * 200])
def test_draft_names_are_plain_tokens(tmp_path, bad):
    with pytest.raises(InvalidArgument):
        box(tmp_path, writer=bad)
    with pytest.raises(InvalidArgument):
        box(tmp_path, user=bad)
