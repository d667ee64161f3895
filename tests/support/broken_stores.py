"""Deliberately broken stores: the conformance suite's own test.

Each fixture wraps a real SQLite store (or its scratch storage) and subverts exactly one
behaviour of the contract. ``PINS`` says which case must catch it and by which reason; the
suite's meta-tests (tests/conformance/) hold every fixture to its pin.

A fixture that must also reach worker subprocesses is installed there by
``inject/sitecustomize.py`` (put on ``PYTHONPATH`` with ``CTRLRUN_TEST_BROKEN_STORE`` naming
it), which wraps ``ctrlrun.store.open_store`` before the worker imports it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from ctrlrun._time import utc_now
from ctrlrun.conformance.store import SQLiteBackend
from ctrlrun.errors import (
    ApprovalMismatch,
    DuplicateEffect,
    DuplicateState,
    MismatchReason,
    NotExecuted,
    Refused,
    SchemaMismatch,
)
from ctrlrun.kernel.approval import ApprovalStatus
from ctrlrun.kernel.effect import LIVE_STATES, EffectRecord, EffectState, Reservation
from ctrlrun.kernel.receipt import StoredReceipt
from ctrlrun.store.codec import result_json
from ctrlrun.store.ops.approvals import check_consumable_in_txn, consume_approval_in_txn
from ctrlrun.store.ops.effects import finish_effect_in_txn
from ctrlrun.store.protocol import FinishRequest, Started
from ctrlrun.store.sqlite import SQLiteStateStore


class Delegate:
    """Everything not overridden goes to the real store."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def now(self) -> Any:
        return self.inner.read(lambda txn: txn.now)

    def force(self, record: EffectRecord, state: EffectState, resolver: str | None = None) -> None:
        """Move ``record`` to ``state`` with the store's own conditional update."""
        self.inner.transact(
            lambda txn: txn.run(
                "effect_move",
                {
                    "effect_key": record.effect_key,
                    "state": str(state),
                    "updated_at": txn.ts(txn.now),
                    "lease_expires_at": None,
                    "result_json": result_json(record.result),
                    "error": record.error,
                    "resolved_by": resolver,
                    "from_state": str(record.state),
                    "action_id": record.action_id,
                    "attempt": record.attempt,
                },
            )
        )


# --- reservation -------------------------------------------------------------------------


class TwoWinners(Delegate):
    """A contender refused as in progress is told it won anyway."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except DuplicateEffect:
            record = self.inner.get_effect(request.effect_key)
            attempt = record.attempt if record else 1
            expiry = utc_now() + request.lease
            return Started(
                Reservation(request.effect_key, request.action_id, attempt, expiry), None
            )


class RefusesWithTheWrongError(Delegate):
    """The right refusals, raised as RuntimeError."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except Refused as exc:
            raise RuntimeError(str(exc)) from exc


class ReleasesAnExpiredLease(Delegate):
    """A lapsed lease is treated as a failure, so a contender renews the key."""

    def start_action(self, request):
        record = self.inner.get_effect(request.effect_key) if request.effect_key else None
        if record is not None and record.state in LIVE_STATES and record.lease_expired(self.now()):
            self.force(record, EffectState.FAILED)
        return self.inner.start_action(request)


class SweepsOnRead(Delegate):
    """Reading a lapsed record marks it AMBIGUOUS."""

    def get_effect(self, key):
        record = self.inner.get_effect(key)
        if record is not None and record.lease_expired(self.now()):
            self.force(record, EffectState.AMBIGUOUS)
        return self.inner.get_effect(key)


# --- approvals ---------------------------------------------------------------------------


class ConsumesBeforeReserving(Delegate):
    """Consumes the approval in one transaction, then reserves in another."""

    def start_action(self, request):
        if request.approval_id is None:
            return self.inner.start_action(request)

        def consume(txn):
            check_consumable_in_txn(
                txn, approval_id=request.approval_id, action_hash=request.action_hash or ""
            )
            consume_approval_in_txn(
                txn, approval_id=request.approval_id, action_id=request.action_id
            )

        self.inner.transact(consume)
        return self.inner.start_action(replace(request, approval_id=None, action_hash=None))


class ChecksTheDuplicateFirst(Delegate):
    """A committed key is refused before the presented approval is looked at."""

    def start_action(self, request):
        record = self.inner.get_effect(request.effect_key) if request.effect_key else None
        if request.approval_id and record is not None and record.state is EffectState.COMMITTED:
            raise DuplicateEffect(
                "already committed", state=DuplicateState.COMMITTED, effect_key=record.effect_key
            )
        return self.inner.start_action(request)


class ConsumesTwice(Delegate):
    """A consumed approval is waved through."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except ApprovalMismatch as exc:
            if exc.reason != MismatchReason.CONSUMED:
                raise
            return self.inner.start_action(replace(request, approval_id=None, action_hash=None))


class IgnoresTheActionHash(Delegate):
    """Any action may spend an approval."""

    def start_action(self, request):
        if request.approval_id:
            record = self.inner.get_approval(request.approval_id)
            if record is not None:
                request = replace(request, action_hash=record.action_hash)
        return self.inner.start_action(request)


class IgnoresExpiry(Delegate):
    """A granted approval is consumed however long ago it expired."""

    def start_action(self, request):
        record = self.inner.get_approval(request.approval_id) if request.approval_id else None
        granted = record is not None and record.status is ApprovalStatus.GRANTED
        if granted and record.is_expired(self.now()):
            self.inner.transact(
                lambda txn: consume_approval_in_txn(
                    txn, approval_id=record.approval_id, action_id=request.action_id
                )
            )
            request = replace(request, approval_id=None, action_hash=None)
        return self.inner.start_action(request)


class UpsertsAnApprovalRequest(Delegate):
    """Recording a request under an existing id resets it to pending."""

    def put_approval_request(self, draft, events=()):
        record = self.inner.get_approval(draft.approval_id)
        if record is None:
            return self.inner.put_approval_request(draft, events)
        self.inner.transact(
            lambda txn: txn.run(
                "approval_set_status",
                {
                    "approval_id": draft.approval_id,
                    "status": "pending",
                    "from_status": str(record.status),
                },
            )
        )
        return self.inner.get_approval(draft.approval_id)


# --- outcomes and resolution -------------------------------------------------------------


class GuessesFailed(Delegate):
    """An unknown outcome is recorded as a failure."""

    def finish_action(self, request):
        if request.outcome is EffectState.AMBIGUOUS:
            request = replace(request, outcome=EffectState.FAILED)
        return self.inner.finish_action(request)


class FailsTheHolderOnRefusal(Delegate):
    """Refusing a contender "cleans up" by failing the holder's attempt."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except DuplicateEffect as exc:
            if exc.state == DuplicateState.IN_PROGRESS:
                held = self.inner.get_effect(request.effect_key)
                self.inner.finish_action(
                    FinishRequest(
                        action_id=held.action_id,
                        receipt={
                            "receipt_id": f"rcp-clean-{held.action_id}",
                            "action_id": held.action_id,
                            "result": "failed",
                        },
                        effect_key=held.effect_key,
                        attempt=held.attempt,
                        outcome=EffectState.FAILED,
                    )
                )
            raise


class RaisesNotExecuted(Delegate):
    """Refusals are reported as "not executed"."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except Refused as exc:
            raise NotExecuted(str(exc)) from exc


class FinishesInTwoTransactions(Delegate):
    """Writes the outcome, then (separately) the events and the receipt."""

    def finish_action(self, request):
        if request.effect_key is not None and request.outcome is not None:
            self.inner.transact(
                lambda txn: finish_effect_in_txn(
                    txn,
                    effect_key=request.effect_key,
                    action_id=request.action_id,
                    attempt=request.attempt or 0,
                    outcome=request.outcome,
                    result=request.result,
                    error=request.error,
                )
            )
        return self.inner.record(request.events, request.receipt)


class ResolvesAnything(Delegate):
    """Resolves whatever it is asked to, whatever the record's state."""

    def resolve_effect(self, key, state, resolver, *, by="human"):
        record = self.inner.get_effect(key)
        if record is None or record.state is EffectState.AMBIGUOUS:
            return self.inner.resolve_effect(key, state, resolver, by=by)
        self.force(record, EffectState(state), resolver)
        return self.inner.get_effect(key)


class ForgetsTheResolver(Delegate):
    """Never reports who resolved a record."""

    def _forget(self, record):
        return None if record is None else replace(record, resolved_by=None)

    def resolve_effect(self, *args, **kwargs):
        return self._forget(self.inner.resolve_effect(*args, **kwargs))

    def get_effect(self, key):
        return self._forget(self.inner.get_effect(key))


# --- evidence ----------------------------------------------------------------------------


class RenumbersEvents(Delegate):
    """Numbers events by their position in each answer."""

    def events(self, action_id=None):
        found = self.inner.events(action_id)
        return tuple(replace(event, event_id=i) for i, event in enumerate(found, start=1))


def _from_zero(receipt):
    if receipt is None or receipt.seq is None:
        return receipt
    return StoredReceipt(receipt.seq - 1, receipt.receipt_id, receipt.text, receipt.hash)


class NumbersReceiptsFromZero(Delegate):
    """Reports receipts one seq lower than stored (the chain starts at 0)."""

    def receipts(self, action_id=None):
        return tuple(_from_zero(r) for r in self.inner.receipts(action_id))

    def finish_action(self, request):
        return _from_zero(self.inner.finish_action(request))

    def record(self, events, receipt=None):
        return _from_zero(self.inner.record(events, receipt))


# --- storage-level lies ------------------------------------------------------------------


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
