"""Sinks: optional exports of every receipt after the store has it. A sink can never fail an
action: an ``Exception`` from one is logged and the call goes on."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from ctrlrun.kernel.approval import ApprovalRecord
from ctrlrun.kernel.receipt import Receipt

log = logging.getLogger("ctrlrun")


@runtime_checkable
class Sink(Protocol):
    """Receives every receipt, in order, after it is committed to the store. A sink may also
    define ``approval(kind, record)`` to see each approval requested, granted, denied or
    expired through its ``Control`` (``emit_approval``)."""

    def receipt(self, receipt: Receipt) -> None:
        """Export ``receipt``. May raise; the caller logs and continues."""
        ...


def emit(sinks: Iterable[Sink], receipt: Receipt) -> None:
    """Hand ``receipt`` to every sink; a sink's ``Exception`` is logged, never raised."""
    for sink in sinks:
        try:
            sink.receipt(receipt)
        except Exception:
            log.exception("ctrlrun: sink %r failed; the action is unaffected", sink)


def emit_approval(sinks: Iterable[Sink], kind: str, record: ApprovalRecord) -> None:
    """Hand an approval's step (``requested``, ``granted``, ``denied``, ``expired``) to every
    sink that has an ``approval(kind, record)`` method; failures are logged, never raised."""
    for sink in sinks:
        hook = getattr(sink, "approval", None)
        if hook is None:
            continue
        try:
            hook(kind, record)
        except Exception:
            log.exception("ctrlrun: sink %r failed; the action is unaffected", sink)


class JSONLSink:
    """Appends each receipt (its stored document, plus its hash) to a JSON-lines file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()

    def receipt(self, receipt: Receipt) -> None:
        """Append one line: the stored document with ``hash`` added."""
        line = json.dumps({**receipt.document, "hash": receipt.hash}, ensure_ascii=False)
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(line + "\n")
