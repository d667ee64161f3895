"""Per-writer drafts on disk: unsaved work that survives a crash and is never applied silently.

Layout: ``<drafts_dir>/<user>/<doc_id>/<writer_id>.json`` is the slot of one writer (a tab, a
process, an agent). A draft moved out of its slot, because its writer took the stored version
instead or because a new session found it at open, becomes ``<writer_id>~<tag>.json`` beside
it. Every other file in the folder is a sibling draft, offered to the user, never adopted
without being asked.

Every write is atomic: a temporary file in the same folder, written, ``fsync``-ed, renamed over
the slot, and the folder ``fsync``-ed, so a process killed at any instant leaves either the old
draft or the new one, never a torn file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from ctrlrun._time import Clock, decode_instant, encode_instant, utc_now
from ctrlrun.canonical import canonical_bytes
from ctrlrun.kernel.document import check_doc_id, check_token

FORMAT: Final = "ctrlrun.draft/v1"
log = logging.getLogger("ctrlrun.documents")


@dataclass(frozen=True, slots=True)
class Draft:
    """Unsaved work of one writer: ``content``, edited from ``base_content`` at
    ``base_version``. ``set_aside`` drafts no longer occupy their writer's slot."""

    path: Path
    user: str
    doc_id: str
    writer_id: str
    base_version: int
    base_content: Any
    content: Any
    written_at: datetime
    set_aside: bool


class DraftBox:
    """The drafts of one (user, document), holding the slot of one writer."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        user: str,
        doc_id: str,
        writer_id: str,
        fsync: bool = True,
        clock: Clock = utc_now,
    ) -> None:
        self.user = check_token(user, "user")
        self.doc_id = check_doc_id(doc_id)
        self.writer_id = check_token(writer_id, "writer id")
        self.folder = Path(root).expanduser() / self.user / self.doc_id
        self.path = self.folder / f"{self.writer_id}.json"
        self._fsync, self._clock = fsync, clock

    def write(self, *, base_version: int, base_content: Any, content: Any) -> None:
        """Replace this writer's draft atomically (see the module docstring). Raises ``OSError``
        if it cannot be written; the previous draft is then intact."""
        record = {
            "format": FORMAT,
            "user": self.user,
            "doc_id": self.doc_id,
            "writer_id": self.writer_id,
            "base_version": base_version,
            "base_content": base_content,
            "content": content,
            "written_at": encode_instant(self._clock()),
        }
        self._replace(self.path, canonical_bytes(record))

    def delete(self) -> None:
        """Remove this writer's draft: only after a save of exactly that work succeeded, or the
        user discarded it."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
            self._sync_folder()

    def set_aside(self, reason: str) -> Path | None:
        """Move this writer's draft out of its slot (an atomic rename) so that it is kept and
        offered as a sibling; returns its new path, or None if there was no draft."""
        if not self.path.exists():
            return None
        stamp = self._clock().strftime("%Y%m%dT%H%M%S")
        target = self.folder / f"{self.writer_id}~{reason}-{stamp}-{secrets.token_hex(3)}.json"
        os.replace(self.path, target)
        self._sync_folder()
        return target

    def own(self) -> Draft | None:
        """This writer's draft, if there is one."""
        return _read(self.path) if self.path.exists() else None

    def siblings(self) -> tuple[Draft, ...]:
        """Every other draft of this (user, document), oldest first: other writers' slots and
        set-aside drafts, this writer's own included. Unreadable files are skipped and logged,
        never deleted."""
        if not self.folder.is_dir():
            return ()
        found = [
            draft
            for path in sorted(self.folder.glob("*.json"))
            if path != self.path and (draft := _read(path)) is not None
        ]
        return tuple(sorted(found, key=lambda d: (d.written_at, d.path.name)))

    def discard(self, draft: Draft) -> None:
        """Delete a sibling draft the user chose to discard (never this writer's slot)."""
        if draft.path.parent != self.folder or draft.path == self.path:
            raise ValueError(f"{draft.path} is not a sibling draft of {self.path}")
        with contextlib.suppress(FileNotFoundError):
            draft.path.unlink()
            self._sync_folder()

    def _replace(self, target: Path, data: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = self.folder / f".{target.stem}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        self._sync_folder()

    def _sync_folder(self) -> None:
        # the rename (or unlink) itself is durable only once the folder is
        if not self._fsync:
            return
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _read(path: Path) -> Draft | None:
    try:
        data = json.loads(path.read_bytes())
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        return Draft(
            path=path,
            user=data["user"],
            doc_id=data["doc_id"],
            writer_id=data["writer_id"],
            base_version=int(data["base_version"]),
            base_content=data["base_content"],
            content=data["content"],
            written_at=decode_instant(data["written_at"]),
            set_aside="~" in path.stem,
        )
    except FileNotFoundError:
        return None  # saved or discarded by its writer while we looked
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("skipping unreadable draft %s: %s", path, exc)
        return None
