"""A Hypothesis state machine: ``DocumentSession`` against a model, on a real SQLite store.

One writer edits through a session while another writes straight to the store; the network
goes down, loses answers after saves landed, and comes back; edits land while saves are in
flight; conflicts are resolved every way; the process "crashes" and the session reopens.

After every step:

* the session holds the user's latest acknowledged edit (no edit is lost or changed silently);
* unsaved work is in this writer's draft on disk, and saved work is the stored version the
  session is based on;
* every line of work ended by a crash or by ``take_theirs`` is still offered as a draft;
* every save request was based on a version this client had been shown, with the content the
  store had for that version (no save overwrites a version it did not base on).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ctrlrun.canonical import canonical_text, digest
from ctrlrun.documents import DocumentSession, DocumentStore, ManualScheduler, SessionState
from ctrlrun.errors import MergeConflict, Unreachable
from ctrlrun.store.sqlite import SQLiteStateStore
from support.doc_clients import HookedClient

# thousands of small files and stores: on tmpfs when there is one, it is several times faster
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
keys = st.sampled_from("abc")
values = st.integers(0, 2)


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ctrlrun-machine-", dir=SCRATCH))
        self.state_store = SQLiteStateStore(self.tmp / "state.db", durability="normal")
        self.docs = DocumentStore(self.state_store)
        self.docs.create("doc", {}, kind="json-object")
        self.client = HookedClient(self.docs, user="alice")
        self.session = self._open()
        self.latest = self.session.content  # the user's latest acknowledged edit
        self.kept: list[dict] = []  # ended lines of work that must stay offered as drafts

    def _open(self) -> DocumentSession:
        self.scheduler = ManualScheduler()
        return DocumentSession(
            self.client,
            "doc",
            writer_id="tab",
            drafts_dir=self.tmp / "drafts",
            scheduler=self.scheduler,
            debounce=0.5,
            retry_delay=1.0,
            fsync=False,
        )

    @property
    def state(self) -> SessionState:
        return self.session.state

    def _edit_hook(self, content):
        """A transport hook that edits once, while a request is in flight."""
        session = self.session

        class Hook:
            done = False

            def __call__(self):
                session.edit(content)
                self.done = True

        return Hook()

    # --- the writer ------------------------------------------------------------------------

    @rule(key=keys, value=values)
    def edit(self, key, value):
        content = {**self.session.content, key: value}
        self.session.edit(content)
        self.latest = content

    @rule(key=keys, value=values)
    def edit_while_a_save_is_in_flight(self, key, value):
        content = {**self.session.content, key: value}
        ran = self.client.during_save = self._edit_hook(content)
        self.session.flush()
        self.client.during_save = None
        if ran.done:
            self.latest = content

    @rule()
    def flush(self):
        self.session.flush()

    @rule(seconds=st.sampled_from([0.5, 1.0, 10.0]))
    def time_passes(self, seconds):
        self.scheduler.advance(seconds)

    @rule()
    def refresh(self):
        was_idle = self.state is SessionState.IDLE
        try:
            applied = self.session.refresh()
        except Unreachable:
            return
        if applied:
            assert was_idle, "a read replaced unsaved local work"
            self.latest = self.session.content

    @rule(key=keys, value=values, reload=st.booleans())
    def edit_while_a_read_is_in_flight(self, key, value, reload):
        content = {**self.session.content, key: value}
        ran = self.client.during_fetch = self._edit_hook(content)
        try:
            applied = self.session.discard_and_reload() if reload else self.session.refresh()
        except Unreachable:
            applied = False
        self.client.during_fetch = None
        if ran.done:
            assert not applied, "a read that raced a local edit was applied"
            self.latest = content

    @rule()
    def discard_and_reload(self):
        try:
            if self.session.discard_and_reload():
                self.latest = self.session.content
        except Unreachable:
            pass

    @rule()
    def crash_and_reopen(self):
        down, lose = self.client.down, self.client.lose_replies
        self.client.down = self.client.lose_replies = False  # reopening needs one fetch
        if self.state is not SessionState.IDLE:
            self.kept.append(self.latest)
        self.session = self._open()  # the old session (and its timers) are gone
        self.latest = self.session.content
        self.client.down, self.client.lose_replies = down, lose

    @precondition(lambda self: self.session.sibling_drafts())
    @rule(pick=st.integers(0, 5))
    def adopt_a_draft(self, pick):
        # by content: set-aside names carry a random tag, and the choice must replay exactly
        drafts = sorted(self.session.sibling_drafts(), key=lambda d: canonical_text(d.content))
        draft = drafts[pick % len(drafts)]
        self.session.adopt_draft(draft)
        self.kept.remove(draft.content)
        self.latest = draft.content

    # --- resolving conflicts ---------------------------------------------------------------

    @precondition(lambda self: self.state is SessionState.CONFLICT)
    @rule()
    def rebase(self):
        try:
            self.session.rebase()
        except (MergeConflict, Unreachable):
            return
        self.latest = self.session.content

    @precondition(lambda self: self.state is SessionState.CONFLICT)
    @rule()
    def keep_mine(self):
        with contextlib.suppress(Unreachable):  # a failed fetch changes nothing
            self.session.keep_mine()

    @precondition(lambda self: self.state is SessionState.CONFLICT)
    @rule()
    def take_theirs(self):
        before = self.latest
        try:
            self.session.take_theirs()
        except Unreachable:
            return
        self.kept.append(before)
        self.latest = self.session.content

    # --- the world -------------------------------------------------------------------------

    @rule(key=keys, value=values)
    def another_writer_saves(self, key, value):
        doc = self.docs.get("doc")
        self.docs.save(
            "doc", {**doc.content, key: value}, expected_version=doc.version, writer="bob"
        )

    @rule(key=keys, value=values, mine=values)
    def a_concurrent_edit(self, key, value, mine):
        """Another writer saves while this one has an edit pending: the next save conflicts."""
        self.another_writer_saves(key, value)
        self.edit(key, mine)
        self.session.flush()

    @rule(mode=st.sampled_from(["up", "up", "down", "lose"]))
    def network(self, mode):
        self.client.down = mode == "down"
        self.client.lose_replies = mode == "lose"

    # --- what must always hold -------------------------------------------------------------

    @invariant()
    def the_latest_edit_is_held(self):
        assert self.session.content == self.latest
        assert self.state is not SessionState.SAVING

    @invariant()
    def unsaved_work_is_on_disk_and_saved_work_is_stored(self):
        own = self.session._drafts.own()
        history = {v.version: v.content_hash for v in self.docs.history("doc")}
        if self.state is SessionState.IDLE:
            assert history[self.session.base_version] == digest(self.latest)
        else:
            assert own is not None and own.content == self.latest
            # the base it records is a real stored version: what a rebase after a crash uses
            assert own.base_version == self.session.base_version
            assert history[own.base_version] == digest(own.base_content)

    @invariant()
    def ended_work_is_still_offered(self):
        offered = Counter(canonical_text(d.content) for d in self.session.sibling_drafts())
        assert offered == Counter(canonical_text(c) for c in self.kept)

    @invariant()
    def saves_are_based_on_versions_this_client_was_shown(self):
        history = {v.version: v.content_hash for v in self.docs.history("doc")}
        for expected, _ in self.client.saves:
            assert self.client.observed.get(expected) == history[expected]

    def teardown(self):
        try:
            self.client.down = self.client.lose_replies = False
            final = self.session.close()
            assert final in (SessionState.IDLE, SessionState.CONFLICT)
            if final is SessionState.IDLE:
                assert self.docs.get("doc").content_hash == digest(self.latest) or (
                    self.docs.history("doc")[self.session.base_version - 1].content_hash
                    == digest(self.latest)
                )
        finally:
            self.state_store.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


SessionMachine.TestCase.settings = settings(
    derandomize=True, max_examples=60, stateful_step_count=30, deadline=None
)
TestDocumentSession = SessionMachine.TestCase
