"""A document client over a real ``DocumentStore`` with a transport hook, for session tests.

Nothing about the store is faked: every request that "reaches the server" runs on the real
store. The hook decides what the network does around it: ``down`` raises ``Unreachable``
before the request; ``lose_replies`` runs the request and then raises ``Unreachable`` (the save
landed, the writer cannot know); ``during_save`` / ``during_fetch`` run a callback once, after
the request reached the store and before its answer is delivered (an edit "while in flight").

It also records what the client observed (``observed``: version → content digest, from answers
actually delivered) and every save request, so tests can check that a session only ever bases
a save on a version it saw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctrlrun.canonical import digest
from ctrlrun.documents.client import LocalDocumentClient
from ctrlrun.documents.store import DocumentStore
from ctrlrun.errors import Unreachable
from ctrlrun.kernel.document import Document


class HookedClient:
    def __init__(self, documents: DocumentStore, *, user: str) -> None:
        self.inner = LocalDocumentClient(documents, user=user)
        self.user = user
        self.down = False
        self.lose_replies = False
        self.during_save: Callable[[], Any] | None = None
        self.during_fetch: Callable[[], Any] | None = None
        self.observed: dict[int, str] = {}
        self.saves: list[tuple[int, str]] = []  # (expected_version, digest) of every request

    def _network(self) -> None:
        if self.down:
            raise Unreachable("the network is down (test)", url="test://")

    def _answer(self) -> None:
        if self.lose_replies:
            raise Unreachable("the answer was lost (test)", url="test://")

    def fetch(self, doc_id: str) -> Document:
        self._network()
        doc = self.inner.fetch(doc_id)
        hook, self.during_fetch = self.during_fetch, None
        if hook is not None:
            hook()
        self._answer()
        self.observed[doc.version] = doc.content_hash
        return doc

    def save(
        self, doc_id: str, content: Any, *, expected_version: int, writer: str | None = None
    ) -> int:
        self._network()
        self.saves.append((expected_version, digest(content)))
        version = self.inner.save(doc_id, content, expected_version=expected_version, writer=writer)
        hook, self.during_save = self.during_save, None
        if hook is not None:
            hook()
        self._answer()
        self.observed[version] = digest(content)
        return version
