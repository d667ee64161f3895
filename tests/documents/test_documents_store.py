"""``DocumentStore`` on both backends: create, get, compare-and-swap save, history, refusals."""

from __future__ import annotations

import threading

import pytest

from ctrlrun.canonical import digest
from ctrlrun.documents.store import DocumentStore
from ctrlrun.errors import (
    DocumentExists,
    DocumentNotFound,
    DocumentTooLarge,
    InvalidArgument,
    VersionConflict,
)


def test_create_get_save_history(docs):
    created = docs.create("plan-1", {"a": 1}, kind="json-object", writer="alice")
    assert (created.version, created.kind, created.content) == (1, "json-object", {"a": 1})
    assert created.content_hash == digest({"a": 1})
    assert docs.save("plan-1", {"a": 2}, expected_version=1, writer="bob") == 2
    got = docs.get("plan-1")
    assert (got.content, got.version, got.updated_by) == ({"a": 2}, 2, "bob")
    content, version = docs.get("plan-1")  # the pair a later save is based on
    assert (content, version) == ({"a": 2}, 2)
    history = docs.history("plan-1")
    assert [(v.version, v.writer, v.content_hash) for v in history] == [
        (1, "alice", digest({"a": 1})),
        (2, "bob", digest({"a": 2})),
    ]
    assert history[0].saved_at <= history[1].saved_at
    assert history[1].saved_at == got.updated_at


def test_the_listing_is_newest_first_without_content(docs):
    assert docs.list() == ()
    for doc_id in ("a-doc", "b-doc", "c-doc"):
        docs.create(doc_id, {"n": 1}, writer="alice")
    docs.save("a-doc", {"n": 2}, expected_version=1, writer="bob")
    listed = docs.list()
    assert listed[0].doc_id == "a-doc"
    assert (listed[0].version, listed[0].updated_by, listed[0].kind) == (2, "bob", "json")
    assert sorted(d.doc_id for d in listed) == ["a-doc", "b-doc", "c-doc"]
    assert [d.updated_at for d in listed] == sorted((d.updated_at for d in listed), reverse=True)
    assert not hasattr(listed[0], "content")
    assert len(docs.list(limit=2)) == 2


@pytest.mark.parametrize("bad", [0, 10_001, True, "5", None])
def test_the_listing_limit_is_checked(sqlite_docs, bad):
    with pytest.raises(InvalidArgument, match="limit"):
        sqlite_docs.list(limit=bad)


def test_a_stale_save_is_refused_with_the_current_version_and_writes_nothing(docs):
    docs.create("d", {"v": 0})
    docs.save("d", {"v": 1}, expected_version=1, writer="a")
    with pytest.raises(VersionConflict) as caught:
        docs.save("d", {"v": "mine"}, expected_version=1, writer="b")
    assert (caught.value.current_version, caught.value.expected_version) == (2, 1)
    assert caught.value.reason == "version_conflict"
    with pytest.raises(VersionConflict) as ahead:
        docs.save("d", {"v": "future"}, expected_version=7, writer="b")
    assert ahead.value.current_version == 2
    assert docs.get("d").content == {"v": 1}
    assert [v.version for v in docs.history("d")] == [1, 2]


def test_identical_content_is_a_noop_answering_the_current_version(docs):
    docs.create("d", {"v": 0})
    assert docs.save("d", {"v": 1}, expected_version=1, writer="a") == 2
    # a retry whose first reply was lost: based on 1, content already stored as 2
    assert docs.save("d", {"v": 1}, expected_version=1, writer="a") == 2
    assert docs.save("d", {"v": 1}, expected_version=2, writer="a") == 2
    assert [v.version for v in docs.history("d")] == [1, 2]


def test_unknown_ids_and_taken_ids(docs):
    with pytest.raises(DocumentNotFound):
        docs.get("nope")
    with pytest.raises(DocumentNotFound):
        docs.save("nope", {}, expected_version=1, writer=None)
    with pytest.raises(DocumentNotFound):
        docs.history("nope")
    docs.create("d", [1, 2])
    docs.save("d", [3], expected_version=1, writer=None)
    with pytest.raises(DocumentExists) as caught:
        docs.create("d", [9])
    assert caught.value.current_version == 2
    assert docs.get("d").content == [3]


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ({"price": 1.5}, InvalidArgument),
        ([float("nan")], InvalidArgument),
        ({1: "int key"}, InvalidArgument),
        ("x" * 2000, DocumentTooLarge),
    ],
)
def test_content_without_a_canonical_form_or_too_large_is_refused(backend, content, error):
    docs = DocumentStore(backend[1], max_content_bytes=1000)
    docs.create("d", "ok")
    with pytest.raises(error):
        docs.save("d", content, expected_version=1, writer=None)
    with pytest.raises(error):
        docs.create("e", content)
    assert docs.get("d").version == 1


@pytest.mark.parametrize("bad", ["", "a/b", "../x", ".hidden", "x y", "é", "a~b", "x" * 129, 7])
def test_ids_are_plain_tokens(sqlite_docs, bad):
    with pytest.raises(InvalidArgument):
        sqlite_docs.create(bad, {})
    with pytest.raises(InvalidArgument):
        sqlite_docs.get(bad)


@pytest.mark.parametrize("bad", [0, -1, True, "1", None, 1.0])
def test_expected_version_is_a_positive_int(sqlite_docs, bad):
    sqlite_docs.create("d", {})
    with pytest.raises(InvalidArgument):
        sqlite_docs.save("d", {"x": 1}, expected_version=bad, writer=None)


@pytest.mark.parametrize("bad", ["", " padded", "a\nb", "x" * 201, 5])
def test_writer_is_printable_text(sqlite_docs, bad):
    sqlite_docs.create("d", {})
    with pytest.raises(InvalidArgument):
        sqlite_docs.save("d", {"x": 1}, expected_version=1, writer=bad)


def test_racing_saves_on_one_base_exactly_one_wins(docs):
    docs.create("d", {"n": 0})
    contenders = 6
    barrier = threading.Barrier(contenders)
    outcomes: list[object] = [None] * contenders

    def save(index: int) -> None:
        barrier.wait(timeout=10)
        try:
            outcomes[index] = docs.save(
                "d", {"n": index + 1}, expected_version=1, writer=f"w{index}"
            )
        except VersionConflict as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=save, args=(i,)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winners = [i for i, o in enumerate(outcomes) if o == 2]
    assert len(winners) == 1, outcomes
    losers = [o for o in outcomes if isinstance(o, VersionConflict)]
    assert len(losers) == contenders - 1
    assert all(o.current_version == 2 for o in losers)
    assert docs.get("d").content == {"n": winners[0] + 1}
    assert [v.writer for v in docs.history("d")] == [None, f"w{winners[0]}"]
