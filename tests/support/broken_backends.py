"""The conformance suite's own test: every broken store, the case that must catch it and the
reason fragment it must give (``FIXTURES``), plus three backends that lie about their storage.

A fixture that must also reach worker subprocesses is installed there by
``inject/sitecustomize.py`` (put on ``PYTHONPATH`` with ``CTRLRUN_TEST_BROKEN_STORE`` naming
it), which wraps ``ctrlrun.store.open_store`` before the worker imports it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ctrlrun.conformance.store import SQLiteBackend
from ctrlrun.errors import SchemaMismatch
from ctrlrun.store.sqlite import SQLiteStateStore
from support.broken_stores import (
    AcceptsAnyApproverName,
    BeginsTwice,
    ChecksTheDuplicateFirst,
    CommitsWhatRaised,
    ConsumesBeforeReserving,
    ConsumesTwice,
    CountsAStaleQuorum,
    DropsResultsThatAreNotJson,
    FailsTheHolderOnRefusal,
    FencesOnClose,
    FinishesInTwoTransactions,
    ForgetsPendingRequests,
    ForgetsTheResolver,
    GuessesFailed,
    IgnoresExpiry,
    IgnoresTheActionHash,
    ListsOnlyPending,
    NumbersReceiptsFromZero,
    RaisesNotExecuted,
    RefusesWithTheWrongError,
    ReleasesAnExpiredLease,
    RenumbersEvents,
    ReservesInTwoTransactions,
    ResolvesAnyAttempt,
    ResolvesAnything,
    SweepsOnRead,
    TwoWinners,
    UpsertsAnApprovalRequest,
)


class Scratch:
    """A scratch whose handles are wrapped by ``wrap`` and whose methods ``lie`` may replace."""

    def __init__(self, real, wrap: Callable[[Any], Any] | None) -> None:
        self.real, self.wrap = real, wrap or (lambda store: store)

    def open(self, clock=None):
        return self.wrap(self.real.open(clock))

    def reopen(self, clock=None):
        store = self.real.reopen(clock)
        return None if store is None else self.wrap(store)

    def url(self):
        return self.real.url()

    def mark_newer_schema(self, migration_id):
        self.real.mark_newer_schema(migration_id)


class FalselyDeclaresNoUrl(Scratch):
    def url(self):
        return None


class LosesEverythingOnReopen(Scratch):
    def reopen(self, clock=None):
        elsewhere = self.real.path.parent / "elsewhere.db"
        return self.real.keep(SQLiteStateStore(elsewhere, clock=clock))


class IgnoresANewerSchema(Scratch):
    """Opening a store at a newer schema "repairs" it by forgetting the unknown migration."""

    def open(self, clock=None):
        try:
            return self.real.open(clock)
        except SchemaMismatch:
            with sqlite3.connect(self.real.path) as conn:
                conn.execute("DELETE FROM schema_version WHERE migration_id LIKE '9999%'")
            conn.close()
            return self.real.open(clock)

    reopen = open


@dataclass(frozen=True)
class Fixture:
    """A broken store: how it is made, and the case and reason that must catch it."""

    name: str
    case: str
    reason: str
    wrap: Callable[[Any], Any] | None = None
    scratch: type[Scratch] = Scratch
    in_children: bool = False


FIXTURES = {
    f.name: f
    for f in (
        Fixture("two-winners", "one-winner-in-process", "of 8 contenders won", TwoWinners),
        Fixture(
            "two-winners-in-children",
            "one-winner-cross-process",
            "of 8 processes won",
            TwoWinners,
            in_children=True,
        ),
        Fixture(
            "refuses-with-the-wrong-error",
            "retry-table",
            "raised RuntimeError",
            RefusesWithTheWrongError,
        ),
        Fixture(
            "releases-an-expired-lease",
            "expired-lease-ambiguous",
            "contend after the lease lapsed: admitted",
            ReleasesAnExpiredLease,
        ),
        Fixture(
            "sweeps-on-read",
            "reads-never-transition",
            "reading the lapsed record returned ambiguous",
            SweepsOnRead,
        ),
        Fixture(
            "consumes-before-reserving",
            "consume-and-reserve-atomic",
            "after a refused reservation the approval is consumed",
            ConsumesBeforeReserving,
        ),
        Fixture(
            "checks-the-duplicate-first",
            "approval-checked-first",
            "raised DuplicateEffect",
            ChecksTheDuplicateFirst,
        ),
        Fixture(
            "consumes-twice-in-children",
            "consume-cross-process",
            "of 8 processes consumed one approval",
            ConsumesTwice,
            in_children=True,
        ),
        Fixture(
            "counts-a-stale-quorum-in-children",
            "quorum-cross-process",
            "2-of-8: 8 grants were accepted and the request is pending",
            CountsAStaleQuorum,
            in_children=True,
        ),
        Fixture(
            "ignores-the-action-hash",
            "binding",
            "consume an approval for hash A with hash B: admitted",
            IgnoresTheActionHash,
        ),
        Fixture(
            "ignores-expiry", "expiry", "one microsecond after it expired: admitted", IgnoresExpiry
        ),
        Fixture(
            "upserts-an-approval-request",
            "insert-not-upsert",
            "a second request with an existing id was accepted",
            UpsertsAnApprovalRequest,
        ),
        Fixture(
            "guesses-failed",
            "transitions",
            "an AMBIGUOUS outcome was stored as failed",
            GuessesFailed,
        ),
        Fixture(
            "fails-the-holder-on-refusal",
            "no-failed-on-refusal",
            "the executing record became failed",
            FailsTheHolderOnRefusal,
        ),
        Fixture("raises-not-executed", "no-not-executed", "raised NotExecuted", RaisesNotExecuted),
        Fixture(
            "finishes-in-two-transactions",
            "store-error-not-failed",
            "finish that raised left the record failed",
            FinishesInTwoTransactions,
        ),
        Fixture(
            "resolves-anything",
            "only-ambiguous",
            "resolve a committed record to failed: admitted",
            ResolvesAnything,
        ),
        Fixture(
            "resolves-any-attempt",
            "only-that-attempt",
            "a verdict about attempt 1: admitted",
            ResolvesAnyAttempt,
        ),
        Fixture(
            "forgets-the-resolver",
            "resolver-recorded",
            "resolve returned resolved_by=None",
            ForgetsTheResolver,
        ),
        Fixture("renumbers-events", "events-in-order", "event ids are not stable", RenumbersEvents),
        Fixture(
            "numbers-receipts-from-zero",
            "receipt-chain",
            "receipts numbered [0",
            NumbersReceiptsFromZero,
        ),
        Fixture(
            "ignores-a-newer-schema",
            "newer-schema-refused",
            "a store at a newer schema: admitted",
            scratch=IgnoresANewerSchema,
        ),
        Fixture(
            "loses-everything-on-reopen",
            "ambiguous-survives",
            "after reopening, the ambiguous record is absent",
            scratch=LosesEverythingOnReopen,
        ),
        Fixture(
            "begins-twice",
            "two-phase-start",
            "begin the same attempt twice: admitted",
            BeginsTwice,
        ),
        Fixture(
            "accepts-any-approver-name",
            "answers",
            "a name with a line break: admitted",
            AcceptsAnyApproverName,
        ),
        Fixture("lists-only-pending", "listing", "list_approvals() returned", ListsOnlyPending),
        Fixture(
            "forgets-pending-requests",
            "reuse",
            "an identical request made",
            ForgetsPendingRequests,
        ),
        Fixture(
            "drops-results-that-are-not-json",
            "ambiguous-settles",
            "was not kept as its repr",
            DropsResultsThatAreNotJson,
        ),
        Fixture("fences-on-close", "close-is-not-a-fence", "after close the record", FencesOnClose),
        Fixture(
            "reserves-in-two-transactions",
            "two-transactions",
            "cost 3 write transactions",
            ReservesInTwoTransactions,
        ),
        Fixture(
            "commits-what-raised",
            "transact-atomic",
            "work that raised was committed",
            CommitsWhatRaised,
        ),
        Fixture(
            "falsely-declares-no-url",
            "one-winner-cross-process",
            "dishonest N/A",
            scratch=FalselyDeclaresNoUrl,
        ),
    )
}


class BrokenBackend:
    """SQLite scratch storage with one fixture's breakage applied to every handle."""

    def __init__(self, fixture: Fixture, directory=None) -> None:
        self.fixture = fixture
        self.real = SQLiteBackend(directory)

    @property
    def name(self) -> str:
        return f"broken: {self.fixture.name}"

    @contextmanager
    def scratch(self, label: str) -> Iterator[Scratch]:
        with self.real.scratch(label) as real:
            yield self.fixture.scratch(real, self.fixture.wrap)


def install(name: str) -> None:
    """Make ``ctrlrun.store.open_store`` return fixture ``name``'s broken store (for workers)."""
    import ctrlrun.store

    fixture = FIXTURES[name]
    real_open = ctrlrun.store.open_store

    def broken_open(url: str, **kwargs: Any) -> Any:
        return fixture.wrap(real_open(url, **kwargs)) if fixture.wrap else real_open(url, **kwargs)

    ctrlrun.store.open_store = broken_open
