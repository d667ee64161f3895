"""The store conformance suite: the state store's contract, runnable by anyone against any
backend.

    from ctrlrun.conformance.store import SQLiteBackend, run

    report = run(SQLiteBackend())
    print(report.to_text())
    assert report.ok

Each case runs on private storage (a fresh SQLite file; a scratch Postgres schema, dropped
also when the case raises) and ends PASS, FAIL (with the reason) or N/A (with a reason the
suite has checked is true). Counting is per case; N/A is never a pass and never in the
denominator; a run in which nothing applied is not ok. Contention is real: threads behind a
barrier, and ``processes`` OS processes behind a file barrier whose arrivals are asserted.

The suites: reservation, approvals, outcomes, resolution, leases, durability, evidence,
migrations (``CASES`` lists every case with the sentence it proves). Standard library only,
beyond the backend's own driver; ``import ctrlrun`` does not import this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctrlrun.conformance.store.backends import (
        PostgresBackend,
        Scratch,
        SQLiteBackend,
        StoreBackend,
    )
    from ctrlrun.conformance.store.framework import Case
    from ctrlrun.conformance.store.report import CaseResult, Report, Status
    from ctrlrun.conformance.store.runner import CASES, SUITES, run

_HOMES = {
    "CASES": "runner",
    "SUITES": "runner",
    "Case": "framework",
    "CaseResult": "report",
    "PostgresBackend": "backends",
    "Report": "report",
    "SQLiteBackend": "backends",
    "Scratch": "backends",
    "Status": "report",
    "StoreBackend": "backends",
    "run": "runner",
}
__all__ = [
    "CASES",
    "SUITES",
    "Case",
    "CaseResult",
    "PostgresBackend",
    "Report",
    "SQLiteBackend",
    "Scratch",
    "Status",
    "StoreBackend",
    "run",
]


def __getattr__(name: str) -> Any:
    """Exports load on first use, so a worker process imports only what it runs."""
    if name not in _HOMES:
        raise AttributeError(f"module 'ctrlrun.conformance.store' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ctrlrun.conformance.store.{_HOMES[name]}"), name)
