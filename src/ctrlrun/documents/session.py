"""``DocumentSession``: one writer's editing session on one document, owned by the document.

States (``SessionState``)::

    idle ──edit──▶ dirty ──flush──▶ saving ──200──▶ idle   (or dirty: newer edits are pending)
                                      ├──409──▶ conflict ──rebase / keep_mine──▶ saving
                                      │                 └──take_theirs──▶ idle
                                      ├──no answer──▶ offline ──retry / edit──▶ saving / dirty
                                      └──refused (400, 413, 404)──▶ rejected ──edit──▶ dirty

Guarantees:

* An edit is acknowledged when ``edit`` returns, and by then it is in this writer's draft on
  disk. Drafts are deleted only when a save of exactly that work succeeded, or the user
  discarded it (``discard_and_reload``); ``take_theirs`` sets the local work aside as a draft.
* Edits debounce into one latest snapshot; one save is in flight at a time; an edit made while a
  save is in flight stays pending and that save's success does not clear it.
* Every save carries its base version. A 409 is the ``conflict`` state, resolved only by an
  explicit call; nothing is last-write-wins. A save whose answer was lost is re-read before a
  later 409 is believed: if the stored content is what it sent, it landed.
* Reads (``refresh``) that arrive out of order, or that raced a local edit, are dropped (a read
  sequence and an edit generation); ``discard_and_reload`` replaces local state only after its
  fetch succeeded. ``close`` flushes and never drops.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, TypeVar

from ctrlrun.canonical import digest
from ctrlrun.documents.client import DocumentClient
from ctrlrun.documents.drafts import Draft, DraftBox
from ctrlrun.documents.merge import Resolve, merge_for
from ctrlrun.documents.schedule import Cancellable, Scheduler, ThreadScheduler
from ctrlrun.errors import CtrlrunError, InvalidArgument, StoreError, VersionConflict
from ctrlrun.kernel.document import Content, Document, check_doc_id, check_token

log = logging.getLogger("ctrlrun.documents")
T = TypeVar("T")
_UNKNOWN_KEPT: Final = 8


class SessionState(StrEnum):
    """Where a session stands; see the module docstring for the transitions."""

    IDLE = "idle"
    DIRTY = "dirty"
    SAVING = "saving"
    CONFLICT = "conflict"
    OFFLINE = "offline"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class _Base:
    """The confirmed base: a version and its content, as the server answered them."""

    version: int
    content: Any


@dataclass(frozen=True, slots=True)
class _Attempt:
    generation: int
    content: Any
    base_version: int
    hash: str


class DocumentSession:
    """Edit ``doc_id`` through ``client`` as ``writer_id`` (a tab, a process, an agent) of
    ``client.user``, with drafts under ``drafts_dir``. See the module docstring.

    Opening fetches the document (raising, with nothing on disk touched, if it cannot) and sets
    any draft left in this writer's slot aside, so it is offered by ``sibling_drafts`` and not
    overwritten by the first edit. ``merge`` overrides the merge of the document's kind for
    ``rebase``. ``debounce`` and ``retry_delay`` are seconds on ``scheduler``.
    """

    def __init__(
        self,
        client: DocumentClient,
        doc_id: str,
        *,
        writer_id: str,
        drafts_dir: str | os.PathLike[str],
        scheduler: Scheduler | None = None,
        debounce: float = 0.5,
        retry_delay: float = 2.0,
        max_retry_delay: float = 60.0,
        merge: Resolve | None = None,
        fsync: bool = True,
    ) -> None:
        self.doc_id = check_doc_id(doc_id)
        self.writer_id = check_token(writer_id, "writer id")
        self.user = check_token(client.user, "user")
        self.writer = f"{self.user}/{self.writer_id}"
        self._client = client
        self._drafts = DraftBox(
            Path(drafts_dir), user=self.user, doc_id=doc_id, writer_id=writer_id, fsync=fsync
        )
        self._scheduler = scheduler or ThreadScheduler()
        self._debounce, self._retry = debounce, (retry_delay, max_retry_delay)
        self._lock = threading.RLock()  # guards every field below; never held over a request
        self._save_lock = threading.Lock()  # one save (or resolution) in flight
        doc = client.fetch(self.doc_id)
        self.kind = doc.kind
        self._merge = merge or merge_for(doc.kind)
        self._base = _Base(doc.version, doc.content)
        self._local: Any = doc.content
        self._state = SessionState.IDLE
        self._generation = 0  # bumped by every local change
        self._read_seq = self._applied_read = 0
        self._conflict_version: int | None = None
        self._unknown: tuple[_Attempt, ...] = ()  # saves whose answer was lost
        self._failures = 0
        self._timer: Cancellable | None = None
        self.last_error: CtrlrunError | None = None
        self._closed = False
        recovered = self._drafts.set_aside("recovered")
        if recovered is not None:
            log.info("%s: a draft left in this writer's slot is offered as %s", self, recovered)

    def __repr__(self) -> str:
        return f"DocumentSession({self.doc_id!r}, writer={self.writer!r}, {self._state})"

    # --- what the session holds -----------------------------------------------------------

    @property
    def state(self) -> SessionState:
        """The current state."""
        return self._state

    @property
    def content(self) -> Any:
        """The local content (a copy): the latest edit, or the stored content when idle."""
        with self._lock:
            return copy.deepcopy(self._local)

    @property
    def base_version(self) -> int:
        """The confirmed version the local content is based on."""
        return self._base.version

    @property
    def conflict_version(self) -> int | None:
        """In ``conflict``: the stored version the refused save ran into."""
        return self._conflict_version

    @property
    def pending(self) -> bool:
        """Whether the local content holds work not yet confirmed stored."""
        with self._lock:
            return self._state is not SessionState.IDLE

    # --- editing and saving ---------------------------------------------------------------

    def edit(self, content: Any) -> None:
        """Make ``content`` the latest local snapshot. When this returns, it is in the draft
        on disk. ``InvalidArgument`` (nothing changed) if it has no canonical JSON form or the
        session is closed; ``OSError`` (nothing changed) if the draft cannot be written."""
        value = copy.deepcopy(Content.of(content).value)
        with self._lock:
            if self._closed:
                raise InvalidArgument(f"{self!r} is closed")
            self._drafts.write(
                base_version=self._base.version, base_content=self._base.content, content=value
            )
            self._local = value
            self._generation += 1
            if self._state in (SessionState.IDLE, SessionState.OFFLINE, SessionState.REJECTED):
                self._state = SessionState.DIRTY
            if self._state is SessionState.DIRTY:
                self._schedule(self._debounce)

    def flush(self) -> SessionState:
        """Save the latest snapshot now, if there is one to save and no save is in flight
        (the one in flight schedules the next when it ends). Never saves over a conflict.
        Network failures become states, not exceptions. Returns the state afterwards."""
        if not self._save_lock.acquire(blocking=False):
            return self._state
        try:
            self._save_once()
        finally:
            self._save_lock.release()
        self._follow_up()
        return self._state

    def _save_once(self) -> None:
        """One save of the latest snapshot (the caller holds ``_save_lock``)."""
        with self._lock:
            if self._state not in (
                SessionState.DIRTY,
                SessionState.OFFLINE,
                SessionState.REJECTED,
            ):
                return
            attempt = _Attempt(
                self._generation, self._local, self._base.version, digest(self._local)
            )
            self._state = SessionState.SAVING
            if self._timer is not None:  # this save takes the latest snapshot already
                self._timer.cancel()
        try:
            version = self._client.save(
                self.doc_id,
                attempt.content,
                expected_version=attempt.base_version,
                writer=self.writer,
            )
        except VersionConflict as exc:
            self._on_conflict(exc)
        except StoreError as exc:  # no usable answer: the save may or may not have landed
            self._on_failure(SessionState.OFFLINE, exc, unknown=attempt)
        except CtrlrunError as exc:  # the server refused this content (400, 413, 404)
            self._on_failure(SessionState.REJECTED, exc)
        else:
            self._on_saved(attempt, version)
        finally:
            with self._lock:
                if self._state is SessionState.SAVING:  # an unexpected exception: stay honest
                    self._state = SessionState.OFFLINE

    def _on_saved(self, attempt: _Attempt, version: int) -> None:
        with self._lock:
            self._base = _Base(version, attempt.content)
            self._unknown, self._failures, self.last_error = (), 0, None
            if self._generation == attempt.generation:
                self._drafts.delete()  # exactly this work is stored
                self._state = SessionState.IDLE
            else:
                self._state = SessionState.DIRTY  # newer edits wait; rebase their draft
                self._rewrite_draft()

    def _on_failure(
        self, state: SessionState, exc: CtrlrunError, *, unknown: _Attempt | None = None
    ) -> None:
        with self._lock:
            self._state, self.last_error = state, exc
            self._failures += 1
            if unknown is not None:
                self._unknown = (*self._unknown, unknown)[-_UNKNOWN_KEPT:]

    def _on_conflict(self, exc: VersionConflict) -> None:
        """A 409. If an earlier save's answer was lost, the conflict may be with that save
        itself: re-read, and if the stored content is what it sent, it landed."""
        if self._unknown:
            try:
                stored = self._client.fetch(self.doc_id)
            except StoreError as failure:
                self._on_failure(SessionState.OFFLINE, failure)
                return
            except CtrlrunError as failure:
                self._on_failure(SessionState.REJECTED, failure)
                return
            landed = next((a for a in self._unknown if a.hash == stored.content_hash), None)
            if landed is not None:
                with self._lock:
                    self._base = _Base(stored.version, landed.content)
                    self._unknown, self._state = (), SessionState.DIRTY
                    self._rewrite_draft()
                return
        with self._lock:
            self._state, self.last_error = SessionState.CONFLICT, exc
            self._conflict_version, self._unknown = exc.current_version, ()

    def _follow_up(self) -> None:
        """After a save: newer edits are saved after the debounce, a failure retried later."""
        with self._lock:
            if self._closed:
                return
            if self._state is SessionState.DIRTY:
                self._schedule(self._debounce)
            elif self._state is SessionState.OFFLINE:
                delay, ceiling = self._retry
                self._schedule(min(delay * 2 ** max(self._failures - 1, 0), ceiling))

    def _schedule(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._scheduler.call_later(delay, self.flush)

    def _rewrite_draft(self) -> None:
        """The draft follows a new base; if it cannot be rewritten, the one on disk still
        holds the latest content (only its base is older), so this is logged, not raised."""
        try:
            self._drafts.write(
                base_version=self._base.version,
                base_content=self._base.content,
                content=self._local,
            )
        except OSError:
            log.exception("%s: could not rewrite the draft for its new base", self)

    # --- resolving a conflict -------------------------------------------------------------

    def rebase(self, resolve: Resolve | None = None) -> SessionState:
        """Merge and save: ``resolve(base, mine, theirs)`` (default: the kind's merge) gets the
        confirmed base, the local copy and the stored one; the result is saved against the
        stored version. ``MergeConflict`` or a failed fetch leave everything as it was."""
        merge = resolve or self._merge
        if merge is None:
            raise InvalidArgument(
                f"documents of kind {self.kind!r} do not merge: choose keep_mine() or"
                " take_theirs(), or pass a resolve function"
            )

        def merged(stored: Document) -> Any:
            args = (self._base.content, self._local, stored.content)
            return Content.of(merge(*copy.deepcopy(args))).value

        return self._resolve(merged)

    def keep_mine(self) -> SessionState:
        """Save the local copy against the stored version: the user has seen the conflict and
        chose to replace the other writer's version."""
        return self._resolve(lambda stored: self._local)

    def take_theirs(self) -> Path | None:
        """Drop the local edits for the stored version, after setting them aside as a draft
        (offered by ``sibling_drafts``); returns that draft's path."""
        with self._save_lock:
            self._require_conflict()
            stored = self._client.fetch(self.doc_id)
            with self._lock:
                self._drafts.write(
                    base_version=self._base.version,
                    base_content=self._base.content,
                    content=self._local,
                )
                kept = self._drafts.set_aside("mine")
                self._replace_with(stored)
        return kept

    def _resolve(self, choose: Callable[[Document], Any]) -> SessionState:
        with self._save_lock:
            self._require_conflict()
            stored = self._client.fetch(self.doc_id)
            with self._lock:
                content = choose(stored)
                self._base = _Base(stored.version, stored.content)
                self._conflict_version, self.last_error = None, None
                self._state = SessionState.DIRTY
                self._local = content
                self._generation += 1
                self._rewrite_draft()
            self._save_once()
        self._follow_up()
        return self._state

    def _require_conflict(self) -> None:
        if self._state is not SessionState.CONFLICT:
            raise InvalidArgument(f"{self!r} has no conflict to resolve")

    # --- reading --------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Fetch the stored version and adopt it if it is newer and nothing local is pending.

        Returns whether it was applied. Dropped: an answer older than one already applied (read
        sequence), one that raced a local edit (generation), one no newer than the base.
        """
        with self._lock:
            self._read_seq += 1
            seq, generation = self._read_seq, self._generation
        stored = self._client.fetch(self.doc_id)
        with self._lock:
            if seq < self._applied_read or generation != self._generation:
                return False
            self._applied_read = seq
            if self._state is not SessionState.IDLE or stored.version <= self._base.version:
                return False
            self._replace_with(stored)
            return True

    def discard_and_reload(self) -> bool:
        """Drop the local work and its draft for the stored version, fetched first: if the
        fetch fails, it raises and nothing local is destroyed. Waits for a save in flight.
        Returns False (nothing discarded) if an edit was made while the fetch was out."""
        with self._save_lock:
            with self._lock:
                self._read_seq += 1
                seq, generation = self._read_seq, self._generation
            stored = self._client.fetch(self.doc_id)
            with self._lock:
                self._applied_read = max(self._applied_read, seq)
                if generation != self._generation:
                    return False
                self._drafts.delete()  # the user discarded this work
                self._replace_with(stored)
                return True

    def _replace_with(self, stored: Document) -> None:
        self._base = _Base(stored.version, stored.content)
        self._local = stored.content
        self._generation += 1
        self._state, self._conflict_version, self.last_error = SessionState.IDLE, None, None
        self._unknown, self._failures = (), 0
        if self._timer is not None:
            self._timer.cancel()

    # --- drafts ---------------------------------------------------------------------------

    def sibling_drafts(self) -> tuple[Draft, ...]:
        """Drafts of this document by this user's other writers, and drafts set aside (by
        ``take_theirs``, or found in this writer's slot at open). Offered, never applied."""
        return self._drafts.siblings()

    def adopt_draft(self, draft: Draft) -> None:
        """Make ``draft``'s content the local edit (as ``edit``), then delete the sibling file:
        the work now lives in this writer's draft."""
        self.edit(draft.content)
        self._drafts.discard(draft)

    def discard_draft(self, draft: Draft) -> None:
        """Delete a sibling draft the user chose not to keep."""
        self._drafts.discard(draft)

    # --- closing --------------------------------------------------------------------------

    def close(self) -> SessionState:
        """Refuse further edits, save what is pending (waiting for a save in flight), and
        return the final state. Work that could not be saved stays in the draft."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
        for _ in range(3):  # a save, the re-read of a lost answer, the save after it
            with self._save_lock:
                self._save_once()
            if self._state is not SessionState.DIRTY:
                break
        return self._state
