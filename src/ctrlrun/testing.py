"""Helpers for testing code that uses ctrlrun, against a real store (never a mock).

* ``ManualClock``: a clock that moves only when told to (``advance``), for leases, approval
  expiry and backoff without sleeping.
* ``control_for(policy_text, directory)``: a ``Control`` over that policy and a fresh SQLite
  store in ``directory`` (e.g. pytest's ``tmp_path``), with a ``ManualClock`` and a
  ``CapturingSink``; close it with ``control.store.close()``.
* ``CapturingSink``: every receipt (and approval step) a ``Control`` emits, in order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctrlrun._time import ManualClock
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.approval import ApprovalRecord
from ctrlrun.kernel.receipt import Receipt
from ctrlrun.runtime.control import Control
from ctrlrun.store.sqlite import SQLiteStateStore

__all__ = ["CapturingSink", "ManualClock", "control_for"]


@dataclass
class CapturingSink:
    """Keeps every receipt and approval step it is given, in order."""

    receipts: list[Receipt] = field(default_factory=list)
    approvals: list[tuple[str, ApprovalRecord]] = field(default_factory=list)

    def receipt(self, receipt: Receipt) -> None:
        """Keep ``receipt``."""
        self.receipts.append(receipt)

    def approval(self, kind: str, record: ApprovalRecord) -> None:
        """Keep one approval step."""
        self.approvals.append((kind, record))

    @property
    def results(self) -> list[str]:
        """The receipts' results, in order (``["committed", "blocked", …]``)."""
        return [str(r.document.get("result")) for r in self.receipts]


def control_for(
    policy_text: str,
    directory: str | os.PathLike[str],
    *,
    clock: ManualClock | None = None,
    **kwargs: Any,
) -> Control:
    """A ``Control`` over ``policy_text`` and a new SQLite store in ``directory``; its clock is
    ``clock`` (a new ``ManualClock`` by default, also used by the store) and its first sink a
    ``CapturingSink`` (``control.sinks[0]``)."""
    moved = clock or ManualClock()
    store = SQLiteStateStore(Path(directory) / "state.db", clock=moved, create=True)
    sinks = [CapturingSink(), *kwargs.pop("sinks", ())]
    return Control(load_policy_text(policy_text), store, clock=moved, sinks=sinks, **kwargs)
