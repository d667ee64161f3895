"""Sessions against the real HTTP server (uvicorn on loopback) and both stores: racing
writers, a server stopped mid-save, lost answers, out-of-order reads, and processes killed
with SIGKILL. Ordering comes from the server's gate (events), never from sleeping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from ctrlrun.documents import (
    DocumentSession,
    HttpDocumentClient,
    LocalDocumentClient,
    ManualScheduler,
    SessionState,
)
from ctrlrun.errors import Unreachable

IDLE, DIRTY, CONFLICT, OFFLINE = (
    SessionState.IDLE,
    SessionState.DIRTY,
    SessionState.CONFLICT,
    SessionState.OFFLINE,
)


def http_session(served, drafts, *, user="alice", writer_id="tab-1", scheduler=None):
    client = HttpDocumentClient(served.url, user=user, timeout=10)
    return DocumentSession(
        client,
        "doc",
        writer_id=writer_id,
        drafts_dir=drafts,
        scheduler=scheduler or ManualScheduler(),
    )


def in_thread(fn):
    result = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


@pytest.mark.parametrize("transport", ["http", "store"])
def test_two_racing_saves_on_one_base_exactly_one_wins(served, drafts, transport):
    served.docs.create("doc", {"n": 0}, kind="json")

    def client(user):
        if transport == "http":
            return HttpDocumentClient(served.url, user=user)
        return LocalDocumentClient(served.docs, user=user)

    sessions = [
        DocumentSession(
            client(user), "doc", writer_id="tab", drafts_dir=drafts, scheduler=ManualScheduler()
        )
        for user in ("alice", "bob")
    ]
    for session in sessions:
        session.edit({"n": session.user})
    barrier = threading.Barrier(2)

    def race(session):
        barrier.wait(timeout=10)
        return session.flush()

    runs = [in_thread(lambda s=s: race(s)) for s in sessions]
    for thread, _ in runs:
        thread.join(timeout=30)
    states = sorted(str(result["value"]) for _, result in runs)
    assert states == ["conflict", "idle"]
    winner = next(s for s in sessions if s.state is IDLE)
    loser = next(s for s in sessions if s.state is CONFLICT)
    assert served.docs.get("doc").content == {"n": winner.user}
    assert [v.version for v in served.docs.history("doc")] == [1, 2]
    assert (loser.content, loser.base_version, loser.conflict_version) == ({"n": loser.user}, 1, 2)
    assert loser._drafts.own().content == {"n": loser.user}  # its edit is intact on disk


def test_a_save_cut_off_by_a_server_stop_stays_pending_and_saves_later(served, drafts):
    served.docs.create("doc", {"a": 1})
    session = http_session(served, drafts)
    session.edit({"a": 2})
    served.gate.arm("PUT")
    thread, result = in_thread(session.flush)
    assert served.gate.arrived.wait(timeout=10)
    served.stop()  # the request is in flight: the server goes away under it
    thread.join(timeout=30)
    assert result["value"] is OFFLINE and isinstance(session.last_error, Unreachable)
    assert session.content == {"a": 2} and session._drafts.own().content == {"a": 2}
    assert session.flush() is OFFLINE  # still down: connection refused
    served.start()
    assert session.flush() is IDLE
    assert served.docs.get("doc").content == {"a": 2} and session._drafts.own() is None


def test_an_answer_lost_after_the_save_landed_is_not_a_conflict(served, drafts):
    served.docs.create("doc", {"a": 1})
    scheduler = ManualScheduler()
    session = http_session(served, drafts, scheduler=scheduler)
    session.edit({"a": 2})
    served.gate.arm("PUT", mode="lose")
    assert session.flush() is OFFLINE and session.last_error.status == 502
    assert served.docs.get("doc").version == 2  # it did land
    session.edit({"a": 3})
    assert session.flush() is DIRTY and session.base_version == 2
    scheduler.advance(1)
    assert session.state is IDLE and served.docs.get("doc").content == {"a": 3}


def test_out_of_order_reads_are_dropped(served, drafts):
    served.docs.create("doc", {"v": 1})
    session = http_session(served, drafts)
    served.docs.save("doc", {"v": 2}, expected_version=1, writer="bob")
    served.gate.arm("GET", "/api/documents/doc", mode="reply")
    thread, early = in_thread(session.refresh)  # reads version 2; its answer is held
    assert served.gate.arrived.wait(timeout=10)
    served.docs.save("doc", {"v": 3}, expected_version=2, writer="bob")
    assert session.refresh() is True and session.content == {"v": 3}  # the later read
    served.gate.release()
    thread.join(timeout=30)
    assert early["value"] is False  # the earlier read's answer arrived last: dropped
    assert (session.content, session.base_version) == ({"v": 3}, 3)


def test_a_read_that_raced_a_local_edit_is_dropped(served, drafts):
    served.docs.create("doc", {"v": 1})
    session = http_session(served, drafts)
    served.docs.save("doc", {"v": 2}, expected_version=1, writer="bob")
    served.gate.arm("GET", "/api/documents/doc", mode="reply")
    thread, read = in_thread(session.refresh)
    assert served.gate.arrived.wait(timeout=10)
    session.edit({"v": "mine"})
    served.gate.release()
    thread.join(timeout=30)
    assert read["value"] is False
    assert (session.content, session.state, session.base_version) == ({"v": "mine"}, DIRTY, 1)


CHILD = r"""
import sys
from ctrlrun.documents import DocumentSession, HttpDocumentClient, ManualScheduler

url, drafts, mode = sys.argv[1:4]
session = DocumentSession(HttpDocumentClient(url, user="alice"), "doc", writer_id="tab-1",
                          drafts_dir=drafts, scheduler=ManualScheduler())
if mode == "save":
    session.edit({"a": "unsaved work"})
    print("edited", flush=True)
    session.flush()
    print("returned", flush=True)
else:
    n = 0
    while True:
        n += 1
        session.edit({"n": n, "pad": "x" * 2000})
        print(n, flush=True)
"""


def child(served, drafts, mode):
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, served.url, str(drafts), mode],
        stdout=subprocess.PIPE,
        text=True,
    )


def kill(process):
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    process.stdout.close()
    assert process.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_a_process_killed_mid_save_loses_nothing(served, drafts):
    served.docs.create("doc", {"a": 1})
    served.gate.arm("PUT")
    process = child(served, drafts, "save")
    assert process.stdout.readline().strip() == "edited"
    assert served.gate.arrived.wait(timeout=30)  # its save is in flight, held
    kill(process)
    assert served.docs.get("doc").version == 1
    reopened = http_session(served, drafts)  # the same writer, after the crash
    assert reopened.content == {"a": 1} and reopened._drafts.own() is None  # nothing applied
    [draft] = reopened.sibling_drafts()
    assert (draft.writer_id, draft.content, draft.base_version) == (
        "tab-1",
        {"a": "unsaved work"},
        1,
    )
    assert [
        d.content for d in http_session(served, drafts, writer_id="tab-2").sibling_drafts()
    ] == [{"a": "unsaved work"}]
    reopened.adopt_draft(draft)
    assert reopened.flush() is IDLE and served.docs.get("doc").content == {"a": "unsaved work"}


@pytest.mark.slow
def test_a_process_killed_while_editing_leaves_its_last_acknowledged_edit(served, drafts):
    served.docs.create("doc", {"a": 1})
    process = child(served, drafts, "edit")
    for _ in range(25):  # let it acknowledge a few edits, then kill it mid-stream
        acknowledged = int(process.stdout.readline())
    kill(process)
    [draft] = http_session(served, drafts).sibling_drafts()
    assert draft.content["n"] >= acknowledged and draft.content["pad"] == "x" * 2000
