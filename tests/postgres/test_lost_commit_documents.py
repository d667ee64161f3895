"""Lost COMMITs on document writes, on the real store through the fault proxy.

A create is witnessed by its row (absent → not landed); a save by the document's version, its
content digest, its writer and the transaction's own instant (still at the base version → not
landed; moved on by someone else → unknown). A save the store cannot settle raises
``AmbiguousWrite`` — a ``StoreError``, which the session reads as "may have landed" (offline),
never as a conflict and never as success; its retry then lands once, or finds it landed.
"""

from __future__ import annotations

import pytest

from ctrlrun.documents import DocumentSession, LocalDocumentClient
from ctrlrun.documents.schedule import ManualScheduler
from ctrlrun.documents.session import SessionState
from ctrlrun.documents.store import DocumentStore
from ctrlrun.errors import AmbiguityReason, AmbiguousWrite

pytestmark = pytest.mark.postgres


def versions(store) -> list[tuple[int, str | None]]:
    return [(v.version, v.writer) for v in DocumentStore(store).history("d")]


@pytest.mark.parametrize(("cut", "branch"), [("after", "A1_OURS"), ("before", "A1_REINSERT")])
def test_a_lost_create_commit_is_settled_by_its_row(
    proxied, direct, pg_proxy, branches, cut, branch
):
    getattr(pg_proxy, f"cut_{cut}_commit")()
    created = DocumentStore(proxied).create("d", {"n": 0}, writer="alice")
    assert branches() == [(branch, None)]
    assert created.version == 1 and versions(direct) == [(1, "alice")]


@pytest.mark.parametrize(("cut", "branch"), [("after", "A2_LANDED"), ("before", "A2_REISSUE")])
def test_a_lost_save_commit_is_settled_by_the_document(
    proxied, direct, pg_proxy, branches, cut, branch
):
    DocumentStore(direct).create("d", {"n": 0})
    getattr(pg_proxy, f"cut_{cut}_commit")()
    assert DocumentStore(proxied).save("d", {"n": 1}, expected_version=1, writer="alice") == 2
    assert branches() == [(branch, None)]
    assert versions(direct) == [(1, None), (2, "alice")]
    assert DocumentStore(direct).get("d").content == {"n": 1}


def test_a_save_overtaken_in_the_window_is_unknown_never_success_or_conflict(
    proxied, direct, pg_proxy, branches
):
    """Our save landed; before the re-read, another writer saved on top of it. Ours is
    somewhere underneath, or not: the store says it does not know."""
    docs = DocumentStore(direct)
    docs.create("d", {"n": 0})
    pg_proxy.cut_after_commit(
        on_cut=lambda: docs.save("d", {"n": 2}, expected_version=2, writer="bob")
    )
    with pytest.raises(AmbiguousWrite) as caught:
        DocumentStore(proxied).save("d", {"n": 1}, expected_version=1, writer="alice")
    assert caught.value.reason is AmbiguityReason.UNRECOGNISED
    assert branches() == [("A2_REFUSE", None)]
    assert versions(direct) == [(1, None), (2, "alice"), (3, "bob")]


@pytest.mark.parametrize("cut", ["after", "before"])
def test_an_unsettled_save_leaves_the_session_offline_and_its_retry_lands_once(
    proxied, direct, pg_proxy, tmp_path, cut
):
    DocumentStore(direct).create("d", {"n": 0})
    client = LocalDocumentClient(DocumentStore(proxied), user="alice")
    session = DocumentSession(
        client, "d", writer_id="tab", drafts_dir=tmp_path, scheduler=ManualScheduler()
    )
    session.edit({"n": 1})
    getattr(pg_proxy, f"cut_{cut}_commit")()
    pg_proxy.refuse_connections(True)  # the re-read cannot settle it
    assert session.flush() is SessionState.OFFLINE
    assert isinstance(session.last_error, AmbiguousWrite)
    assert session.last_error.reason is AmbiguityReason.REREAD_FAILED
    assert session.pending and list(tmp_path.rglob("tab.json"))  # the edit is on disk
    stored = DocumentStore(direct).get("d")
    assert stored.version == (2 if cut == "after" else 1)
    pg_proxy.refuse_connections(False)
    assert session.flush() is SessionState.IDLE  # landed: answered as the no-op it is
    assert (session.base_version, session.content) == (2, {"n": 1})
    assert versions(direct) == [(1, None), (2, "alice/tab")]  # once, never twice
    assert not list(tmp_path.rglob("tab.json"))
    session.close()
