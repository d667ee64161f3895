"""``DocumentSession`` over a real SQLite ``DocumentStore``, driven by a manual scheduler.

The transport hook (``support.doc_clients.HookedClient``) decides only what the network does:
down, a lost answer, an edit while a request is in flight. Every request that gets through runs
on the real store.
"""

from __future__ import annotations

import json
import threading

import pytest

from ctrlrun.canonical import digest
from ctrlrun.documents import (
    DocumentSession,
    DocumentStore,
    LocalDocumentClient,
    ManualScheduler,
    SessionState,
)
from ctrlrun.documents.drafts import DraftBox
from ctrlrun.errors import DocumentTooLarge, InvalidArgument, MergeConflict, Unreachable
from support.doc_clients import HookedClient

IDLE, DIRTY, SAVING = SessionState.IDLE, SessionState.DIRTY, SessionState.SAVING
CONFLICT, OFFLINE, REJECTED = SessionState.CONFLICT, SessionState.OFFLINE, SessionState.REJECTED


@pytest.fixture
def store(sqlite_state):
    docs = DocumentStore(sqlite_state, max_content_bytes=2000)
    docs.create("doc", {"a": 1, "b": 1}, kind="json-object")
    docs.create("sheet", {"A1": "x"}, kind="sheet")
    return docs


@pytest.fixture
def scheduler():
    return ManualScheduler()


@pytest.fixture
def open_session(store, drafts, scheduler):
    def open_(user="alice", writer_id="tab-1", doc_id="doc", client=None):
        client = client or HookedClient(store, user=user)
        return DocumentSession(
            client,
            doc_id,
            writer_id=writer_id,
            drafts_dir=drafts,
            scheduler=scheduler,
            debounce=0.5,
            retry_delay=2.0,
        )

    return open_


def own_draft(session):
    return session._drafts.own()


def stored(store, doc_id="doc"):
    return store.get(doc_id).content


def test_edits_debounce_into_one_save_of_the_latest_snapshot(store, open_session, scheduler):
    session = open_session()
    for n in range(3):
        session.edit({"a": 1, "b": 1, "n": n})
        scheduler.advance(0.4)  # each edit restarts the debounce
    assert session.state is DIRTY and len(store.history("doc")) == 1
    assert own_draft(session).content == {"a": 1, "b": 1, "n": 2}
    scheduler.advance(0.2)
    assert session.state is IDLE and session.base_version == 2
    assert stored(store) == {"a": 1, "b": 1, "n": 2}
    assert [v.writer for v in store.history("doc")] == [None, "alice/tab-1"]
    assert own_draft(session) is None  # exactly that work was saved


def test_an_edit_made_while_a_save_is_in_flight_stays_pending(store, open_session, scheduler):
    session = open_session()
    session.edit({"a": 2})
    session._client.during_save = lambda: session.edit({"a": 3})
    assert session.flush() is DIRTY  # the success did not clear the newer edit
    assert (session.base_version, stored(store), session.content) == (2, {"a": 2}, {"a": 3})
    draft = own_draft(session)
    assert (draft.content, draft.base_version, draft.base_content) == ({"a": 3}, 2, {"a": 2})
    scheduler.advance(0.5)
    assert session.state is IDLE and stored(store) == {"a": 3} and own_draft(session) is None


def test_one_save_in_flight_at_a_time(store, open_session):
    session = open_session()
    session.edit({"a": 2})
    answers = []
    session._client.during_save = lambda: answers.append((session.state, session.flush()))
    session.flush()
    assert answers == [(SAVING, SAVING)]  # the second flush returned without a request
    assert len(session._client.saves) == 1


def test_a_conflict_keeps_the_edit_and_never_saves_over_it(store, open_session, scheduler):
    mine, theirs = open_session(), open_session(user="bob")
    theirs.edit({"a": 1, "b": 9})
    theirs.flush()
    mine.edit({"a": 7, "b": 1})
    assert mine.flush() is CONFLICT
    assert (mine.content, mine.conflict_version, mine.base_version) == ({"a": 7, "b": 1}, 2, 1)
    assert own_draft(mine).content == {"a": 7, "b": 1}
    mine.edit({"a": 8, "b": 1})  # still editable, still in conflict, still on disk
    scheduler.advance(10)
    assert mine.flush() is CONFLICT and mine.state is CONFLICT
    assert len(mine._client.saves) == 1 and stored(store) == {"a": 1, "b": 9}
    assert own_draft(mine).content == {"a": 8, "b": 1}


def _conflicted(open_session, mine_content, theirs_content, doc_id="doc"):
    mine, theirs = open_session(doc_id=doc_id), open_session(user="bob", doc_id=doc_id)
    theirs.edit(theirs_content)
    assert theirs.flush() is IDLE
    mine.edit(mine_content)
    assert mine.flush() is CONFLICT
    return mine


def test_rebase_merges_and_saves_against_the_stored_version(store, open_session):
    mine = _conflicted(open_session, {"a": 7, "b": 1}, {"a": 1, "b": 9, "c": 3})
    assert mine.rebase() is IDLE
    assert stored(store) == mine.content == {"a": 7, "b": 9, "c": 3}
    assert [(v.version, v.writer) for v in store.history("doc")] == [
        (1, None),
        (2, "bob/tab-1"),
        (3, "alice/tab-1"),
    ]
    assert own_draft(mine) is None


def test_a_merge_conflict_changes_nothing(store, open_session):
    mine = _conflicted(open_session, {"a": 7, "b": 1}, {"a": 5, "b": 1})
    with pytest.raises(MergeConflict) as caught:
        mine.rebase()
    assert caught.value.keys == ("a",)
    assert (mine.state, mine.content, mine.base_version) == (CONFLICT, {"a": 7, "b": 1}, 1)
    assert own_draft(mine).content == {"a": 7, "b": 1}


def test_a_kind_that_cannot_merge_leaves_the_choice_to_the_user(store, open_session):
    mine = _conflicted(open_session, {"A1": "mine"}, {"A1": "theirs"}, doc_id="sheet")
    with pytest.raises(InvalidArgument, match="do not merge"):
        mine.rebase()
    assert mine.rebase(lambda base, me, them: {**them, "B1": me["A1"]}) is IDLE
    assert stored(store, "sheet") == {"A1": "theirs", "B1": "mine"}


def test_keep_mine_resaves_against_the_stored_version(store, open_session):
    mine = _conflicted(open_session, {"a": 7}, {"a": 5})
    assert mine.keep_mine() is IDLE
    assert stored(store) == {"a": 7} and mine.base_version == 3
    assert [v.writer for v in store.history("doc")][-1] == "alice/tab-1"


def test_take_theirs_sets_the_local_edits_aside_as_a_draft(store, open_session):
    mine = _conflicted(open_session, {"a": 7}, {"a": 5})
    kept = mine.take_theirs()
    assert (mine.state, mine.content, mine.base_version) == (IDLE, {"a": 5}, 2)
    assert own_draft(mine) is None
    [draft] = mine.sibling_drafts()
    assert (draft.path, draft.content, draft.base_version, draft.set_aside) == (
        kept,
        {"a": 7},
        1,
        True,
    )
    assert [d.content for d in open_session(writer_id="tab-2").sibling_drafts()] == [{"a": 7}]


def test_resolving_needs_a_conflict(open_session):
    session = open_session()
    for resolve in (session.rebase, session.keep_mine, session.take_theirs):
        with pytest.raises(InvalidArgument, match="no conflict"):
            resolve()


def test_offline_keeps_the_edit_and_its_draft_and_retries(store, open_session, scheduler):
    session = open_session()
    session._client.down = True
    session.edit({"a": 2})
    assert session.flush() is OFFLINE
    assert isinstance(session.last_error, Unreachable)
    assert session.content == {"a": 2} and own_draft(session).content == {"a": 2}
    scheduler.advance(2.0)  # the first retry, still down
    assert session.state is OFFLINE and len(scheduler._queue) >= 1
    session._client.down = False
    scheduler.advance(4.0)  # the second retry, backed off to 4 s
    assert session.state is IDLE and stored(store) == {"a": 2} and own_draft(session) is None


def test_a_save_whose_answer_was_lost_is_not_a_conflict_with_itself(store, open_session, scheduler):
    session = open_session()
    session._client.lose_replies = True
    session.edit({"a": 2})
    assert session.flush() is OFFLINE  # it landed as version 2; the session cannot know
    session._client.lose_replies = False
    session.edit({"a": 3})
    session.flush()  # 409 against version 2, which is its own save: re-read, adopt, go on
    assert session.state is DIRTY and session.base_version == 2
    scheduler.advance(0.5)
    assert session.state is IDLE and stored(store) == {"a": 3}
    assert [v.content_hash for v in store.history("doc")][1:] == [
        digest({"a": 2}),
        digest({"a": 3}),
    ]


def test_a_lost_answer_is_believed_landed_only_if_the_stored_content_is_what_it_sent(
    store, open_session
):
    session = open_session()
    session._client.lose_replies = True
    session.edit({"a": 2})
    session.flush()  # landed as version 2, answer lost
    session._client.lose_replies = False
    store.save("doc", {"a": "bob"}, expected_version=2, writer="bob")  # then someone else
    session.edit({"a": 3})
    assert session.flush() is CONFLICT  # version 3 is not its own save: never written over
    assert (session.conflict_version, stored(store)) == (3, {"a": "bob"})


def test_a_lost_answer_retried_unchanged_is_the_noop_it_is(store, open_session):
    session = open_session()
    session._client.lose_replies = True
    session.edit({"a": 2})
    session.flush()
    session._client.lose_replies = False
    assert session.flush() is IDLE and session.base_version == 2
    assert len(store.history("doc")) == 2


def test_a_refused_content_is_rejected_and_kept(store, open_session, scheduler):
    session = open_session()
    session.edit({"a": "x" * 3000})  # over this store's 2000-byte limit
    assert session.flush() is REJECTED
    assert isinstance(session.last_error, DocumentTooLarge)
    assert own_draft(session).content == {"a": "x" * 3000}
    session.edit({"a": "short"})
    scheduler.advance(0.5)
    assert session.state is IDLE and stored(store) == {"a": "short"}


def test_an_edit_without_a_canonical_form_changes_nothing(open_session):
    session = open_session()
    session.edit({"a": 2})
    with pytest.raises(InvalidArgument):
        session.edit({"a": 2.5})
    assert session.content == {"a": 2} and own_draft(session).content == {"a": 2}


def test_discard_and_reload_fetches_first_and_destroys_nothing_offline(store, open_session):
    session = open_session()
    session.edit({"a": 2})
    session._client.down = True
    with pytest.raises(Unreachable):
        session.discard_and_reload()
    assert session.content == {"a": 2} and own_draft(session).content == {"a": 2}
    session._client.down = False
    assert session.discard_and_reload() is True
    assert (session.state, session.content, own_draft(session)) == (IDLE, {"a": 1, "b": 1}, None)


def test_discard_and_reload_raced_by_an_edit_keeps_the_edit(open_session):
    session = open_session()
    session.edit({"a": 2})
    session._client.during_fetch = lambda: session.edit({"a": 3})
    assert session.discard_and_reload() is False
    assert session.content == {"a": 3} and own_draft(session).content == {"a": 3}


def test_refresh_adopts_a_newer_version_only_when_nothing_is_pending(store, open_session):
    session = open_session()
    store.save("doc", {"a": 5}, expected_version=1, writer="bob")
    assert session.refresh() is True and session.content == {"a": 5}
    store.save("doc", {"a": 6}, expected_version=2, writer="bob")
    session.edit({"a": 9})
    assert session.refresh() is False and session.content == {"a": 9}


def test_a_read_that_raced_a_local_edit_is_dropped(store, open_session):
    session = open_session()
    store.save("doc", {"a": 5}, expected_version=1, writer="bob")
    session._client.during_fetch = lambda: session.edit({"a": 1, "b": 1, "mine": True})
    assert session.refresh() is False
    assert session.content == {"a": 1, "b": 1, "mine": True} and session.base_version == 1


def test_close_flushes_and_never_drops(store, open_session):
    session = open_session()
    session.edit({"a": 2})
    assert session.close() is IDLE and stored(store) == {"a": 2}
    with pytest.raises(InvalidArgument, match="closed"):
        session.edit({"a": 3})
    offline = open_session(writer_id="tab-2")
    offline.edit({"a": 4})
    offline._client.down = True
    assert offline.close() is OFFLINE
    assert own_draft(offline).content == {"a": 4}


def test_sibling_drafts_are_offered_never_applied(store, open_session):
    other = open_session(writer_id="tab-2")
    other._client.down = True
    other.edit({"a": "from tab 2"})
    other.flush()
    session = open_session()
    assert session.content == {"a": 1, "b": 1}
    [draft] = session.sibling_drafts()
    assert (draft.writer_id, draft.content, draft.set_aside) == (
        "tab-2",
        {"a": "from tab 2"},
        False,
    )
    assert open_session(user="bob").sibling_drafts() == ()  # another user's drafts are theirs
    session.adopt_draft(draft)
    assert session.content == {"a": "from tab 2"} and session.sibling_drafts() == ()
    assert own_draft(session).content == {"a": "from tab 2"}


def test_a_draft_left_in_this_writers_slot_is_set_aside_at_open(store, drafts, open_session):
    box = DraftBox(drafts, user="alice", doc_id="doc", writer_id="tab-1")
    box.write(base_version=1, base_content={"a": 1, "b": 1}, content={"a": "crashed"})
    session = open_session()
    assert own_draft(session) is None and session.content == {"a": 1, "b": 1}
    [draft] = session.sibling_drafts()
    assert (draft.writer_id, draft.content, draft.set_aside) == ("tab-1", {"a": "crashed"}, True)
    session.edit({"a": "new work"})  # does not overwrite the recovered draft
    assert [d.content for d in session.sibling_drafts()] == [{"a": "crashed"}]
    session.discard_draft(draft)
    assert session.sibling_drafts() == ()


def test_the_default_scheduler_saves_after_the_debounce(store, drafts):
    saved = threading.Event()
    client = HookedClient(store, user="alice")
    session = DocumentSession(client, "doc", writer_id="t", drafts_dir=drafts, debounce=0.01)
    client.during_save = saved.set
    session.edit({"a": 2})
    assert saved.wait(timeout=10)
    assert session.close() is IDLE and stored(store) == {"a": 2}


def test_drafts_are_canonical_json_files_of_their_writer(store, drafts, open_session):
    session = open_session()
    session.edit({"b": 2, "a": 1})
    path = drafts / "alice" / "doc" / "tab-1.json"
    record = json.loads(path.read_bytes())
    assert record["content"] == {"a": 1, "b": 2} and record["base_version"] == 1
    assert path.read_bytes().startswith(b'{"base_content":')  # sorted keys, no spaces
    assert path.stat().st_mode & 0o777 == 0o600
    assert list(path.parent.glob("*.tmp")) == []


def test_local_client_records_the_user(store, drafts):
    session = DocumentSession(
        LocalDocumentClient(store, user="carol"),
        "doc",
        writer_id="agent-7",
        drafts_dir=drafts,
        scheduler=ManualScheduler(),
    )
    session.edit({"a": 2})
    assert session.flush() is IDLE
    assert store.get("doc").updated_by == "carol/agent-7"
