"""``PostgresStateStore``: the ``StateStore`` protocol on Postgres, for agents on many hosts.

The same contract as the SQLite store, earned differently: the reservation is
``INSERT … ON CONFLICT (effect_key) DO NOTHING`` with its row count checked, every later
transition a conditional ``UPDATE`` on state, action_id and attempt with its row count checked,
under the server's default isolation level — the guarantee is the unique index. Decisions come
from the same kernel planners, through the same ``store/ops`` functions; lease time is the
database's clock. A COMMIT whose answer never came is settled by re-reading (``engine``).

This module imports no driver: psycopg is loaded when a store is first constructed, and its
absence raises ``MissingDependency`` naming the extra to install.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ctrlrun._time import Clock, check_positive, utc_now
from ctrlrun.errors import AmbiguousEffect, CtrlrunError, StoreError
from ctrlrun.kernel.event import EventDraft
from ctrlrun.kernel.receipt import Receipt
from ctrlrun.store.base import SQLStore
from ctrlrun.store.ops import KeptRefusal, Txn
from ctrlrun.store.ops.actions import record_in_txn, start_action_in_txn
from ctrlrun.store.postgres import folded
from ctrlrun.store.postgres.durability import DEFAULT_COMMIT_TIMEOUT, Durability, Replication
from ctrlrun.store.postgres.names import check_schema_name, load_driver
from ctrlrun.store.postgres.skew import DEFAULT_THRESHOLD, ClockSkew, SkewSchedule, measure
from ctrlrun.store.postgres.witness import GuardMissed
from ctrlrun.store.protocol import FinishRequest, Started, StartRequest

if TYPE_CHECKING:
    from ctrlrun.store.postgres.engine import Engine
    from ctrlrun.store.postgres.txn import PgTxn

T = TypeVar("T")
log = logging.getLogger("ctrlrun.postgres")


def _utc(value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a timestamptz, got {value!r}")
    return value.astimezone(UTC)


class PostgresStateStore(SQLStore):
    """``StateStore`` on one schema of a Postgres database (see the module docstring).

    ``url`` goes to ``psycopg.connect`` unchanged. ``schema`` must be a plain identifier and
    must exist; opening checks the server (not a standby, UTF8), the role's privileges, and
    migrates forward. ``clock`` (tests) replaces the database's clock for leases and stamps;
    ``clock_skew_threshold`` is how far the application clock may drift from the server's
    before a ``CLOCK_SKEW_DETECTED`` event is appended. ``commit_timeout`` bounds one COMMIT's
    wait in seconds (None: unbounded); past it, or when the server answers a COMMIT without
    confirming it (a cancelled synchronous-replication wait), the outcome is unknown.
    ``require_sync`` refuses to write where a COMMIT would not wait for a synchronous standby
    (``ReplicationRefused``). ``replication`` reports what the store writes under.
    ``partitions`` is how many receipt chains a new store is created with (1 to 4096;
    default 64, so concurrent calls for different effects rarely share a head row); an
    existing store keeps its own count, and opening it with another refuses
    (``PartitionsMismatch``).
    """

    dialect: Final = "postgres"

    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        clock: Clock | None = None,
        clock_skew_threshold: timedelta = DEFAULT_THRESHOLD,
        create: bool = True,
        commit_timeout: float | None = DEFAULT_COMMIT_TIMEOUT,
        require_sync: bool = False,
        partitions: int | None = None,
        _migrate: bool = True,
    ) -> None:
        self.schema = check_schema_name(schema)
        self._threshold = check_positive(clock_skew_threshold, "clock_skew_threshold")
        durability = Durability(commit_timeout=commit_timeout, require_sync=require_sync)
        load_driver()
        from ctrlrun.store.postgres.atopen import open_engine

        self._app_clock: Clock = clock or utc_now
        self._writing = _migrate
        self._engine: Engine = open_engine(
            url,
            self.schema,
            clock,
            writing=_migrate,
            create=create,
            durability=durability,
            partitions=partitions,
        )
        self._report_replication()
        self._schedule = SkewSchedule()
        self._skew: ClockSkew | None = None
        self._check_skew("open")

    @property
    def partitions(self) -> int:
        """How many receipt chains the store keeps (fixed when it was created)."""
        return self._engine.partitions

    @property
    def replication(self) -> Replication | None:
        """The replication the store writes under, as its newest connection read it."""
        return self._engine.guard.latest if self._engine.guard is not None else None

    def _report_replication(self) -> None:
        seen = self.replication
        if seen is None:
            return
        # a standby that lacks what this store writes is a failover away from losing it
        exposed = seen.standbys > 0 and not seen.waits_for_standby
        level = logging.WARNING if exposed else logging.INFO
        log.log(
            level,
            "ctrlrun.postgres: %s writes under %s",
            self._engine.where,
            seen.describe(),
            extra={"replication": seen.to_dict()},
        )

    @classmethod
    def open_existing(
        cls,
        url: str,
        *,
        schema: str = "public",
        clock: Clock | None = None,
        partitions: int | None = None,
    ) -> PostgresStateStore:
        """Open a store that must already exist at this binary's schema; create and migrate
        nothing, and append nothing at open. For commands that read evidence (or resolve):
        a missing, empty, behind or ahead schema raises ``SchemaMismatch`` with an
        instruction; ``partitions``, when given, must be the store's count
        (``PartitionsMismatch``)."""
        return cls(url, schema=schema, clock=clock, partitions=partitions, _migrate=False)

    @staticmethod
    def create_schema(url: str, name: str) -> None:
        """Create schema ``name`` (for tests and ``ctrlrun verify`` scratch stores; a store
        never creates its own). Raises ``StoreError`` if it exists or cannot be created."""
        check_schema_name(name)
        psycopg = load_driver()
        from psycopg import sql

        try:
            with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        except psycopg.Error as exc:
            raise StoreError(f"could not create schema {name!r}: {exc}") from exc

    # --- the protocol's plumbing ---------------------------------------------------------

    def _rows(self, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self._engine.rows(query, dict(params or {}))

    @staticmethod
    def _read_ts(value: Any) -> datetime:
        return _utc(value)

    @property
    def write_transactions(self) -> int:
        """How many write transactions this handle has committed (settled ones included)."""
        return self._engine.committed

    @property
    def clock_skew(self) -> ClockSkew | None:
        """The latest measurement of the application clock against the server's."""
        return self._skew

    def _write(self, work: Callable[[Any], T], operation: str) -> T:
        """``work(txn)`` in one write transaction. Driver errors before the COMMIT took effect
        raise ``WriteFailed``. A COMMIT that went unanswered is settled by re-reading a row the
        transaction wrote that a re-read can recognise (an effect, an approval, a document, an
        outbox settle, a receipt): landed → ``work``'s result; not landed → ``work`` runs once
        more in a new transaction; otherwise, or when it wrote none of those,
        ``AmbiguousWrite`` (``engine``)."""
        return self._engine.write(work, operation=operation)

    def execute_on(self, conn: Any, name: str, params: Mapping[str, Any]) -> tuple[int, list[Any]]:
        """Named query ``name`` on the caller's own psycopg connection, inside the caller's
        transaction (``store/postgres/caller.py``)."""
        from ctrlrun.store.postgres.caller import execute_on

        return execute_on(conn, self.schema, name, params)

    def read(self, work: Callable[[Txn], T]) -> T:
        """Run ``work(txn)`` outside any transaction (it must only read)."""
        return self._engine.read(work)

    def close(self) -> None:
        """Release every connection. Not a fence: later calls reconnect."""
        self._engine.connections.close()

    # --- the protected call --------------------------------------------------------------

    def start_action(self, request: StartRequest) -> Started:
        """See ``StateStore.start_action``. Overrides the shared path on the hot path: folded
        into the COMMIT's message when the key is absent; a key that exists (``GuardMissed``:
        the reservation answered with the record it met and wrote nothing) is refused from
        that record when the planner refuses it outright, and otherwise goes to the shared
        ``start_action_in_txn``, which reads the record and asks the planner."""
        lapsed: list[bool] = []

        def run(fold: bool) -> Started | folded.PendingStart:
            def work(txn: PgTxn) -> Started | folded.PendingStart:
                try:
                    return folded.start(txn, request) if fold else start_action_in_txn(txn, request)
                except KeptRefusal as kept:
                    lapsed.append(isinstance(kept.refusal, AmbiguousEffect))
                    raise

            return self._engine.write(work, operation="start_action")

        try:
            try:  # a budgeted call's charge goes with the shared path (decision 0028)
                started = run(fold=request.budget is None)
            except GuardMissed as missed:
                # a duplicate in 2 round trips instead of 9 (decisions 0031, 0032; performance.md)
                refusal = folded.refusal_met(missed.detail, request)
                if refusal is not None:
                    raise refusal from None
                started = run(fold=False)
        except AmbiguousEffect:
            if any(lapsed):  # a lease was found expired: judge the clocks (never the lease)
                self._check_skew("lease_expired", request.action_id, request.effect_key)
            raise
        return self._granted(started)

    def _granted(self, started: Started | folded.PendingStart) -> Started:
        """What a folded start granted: from the COMMIT's answer, or — when the answer was
        lost and the re-read proved the reservation ours — from the record."""
        if isinstance(started, Started):
            return started
        granted = started.started()
        if granted is not None:
            return granted
        key = started.request.effect_key
        record = self.get_effect(key) if key is not None else None
        if record is None or record.lease_expires_at is None:
            raise StoreError(f"the reservation of {key!r} landed but cannot be read back")
        return started.granted(record.lease_expires_at)

    def finish_action(self, request: FinishRequest) -> Receipt:
        """See ``StateStore.finish_action``. Overrides the shared path: folded into the
        COMMIT's message; when the outcome's conditional move matched no row (``GuardMissed``,
        nothing committed), the shared path re-reads and decides in a new transaction. An
        outcome that tells someone (``notices``: a new AMBIGUOUS) takes the shared path, its
        messages in the same transaction: rare, so unfolded."""
        if request.notices or request.give_back_budget:  # rare: the shared path
            return super().finish_action(request)
        try:
            pending = self._write(lambda txn: folded.finish(txn, request), "finish_action")
        except GuardMissed:
            return super().finish_action(request)
        return self._stored(pending)

    def record(
        self, events: tuple[EventDraft, ...], receipt: Mapping[str, Any] | None = None
    ) -> Receipt | None:
        """See ``StateStore.record``. Overrides the shared path: one folded message."""
        pending = self._write(lambda txn: folded.record(txn, events, receipt), "record")
        return None if pending is None else self._stored(pending)

    def _stored(self, pending: folded.PendingReceipt) -> Receipt:
        """The receipt a folded transaction appended: from the COMMIT's answer, or — when the
        answer was lost and the re-read proved the transaction landed — read back."""
        stored = pending.stored()
        if stored is not None:
            return stored
        rows = self._rows("receipt_get", {"receipt_id": pending.receipt_id})
        if not rows:
            raise StoreError(f"receipt {pending.receipt_id} landed but cannot be read back")
        row = rows[0]
        return Receipt(
            int(row["seq"]),
            pending.receipt_id,
            row["document"],
            row["hash"],
            partition=int(row["partition_id"]),
        )

    # --- clock skew ----------------------------------------------------------------------

    def _check_skew(
        self, trigger: str, action_id: str | None = None, effect_key: str | None = None
    ) -> None:
        """Measure the application clock against the server's and, beyond the threshold,
        append ``CLOCK_SKEW_DETECTED`` (not from a reading open, which writes nothing). A
        failed measurement is logged and changes nothing; no lease decision depends on it."""
        if trigger != "open" and not self._schedule.due(self._app_clock()):
            return
        try:
            skew = measure(
                self._app_clock,
                self._engine.server_clock,
                threshold=self._threshold,
                trigger=trigger,
            )
            self._skew = skew
            if skew.exceeded:
                log.warning(
                    "ctrlrun.postgres: the application clock is %s %s from the database's"
                    " (±%s); leases follow %s",
                    "ahead" if skew.skew > timedelta(0) else "behind",
                    abs(skew.skew),
                    skew.bound,
                    "the clock this store was given" if self._engine.clock else "the database's",
                    extra={"trigger": trigger, "effect_key": effect_key},
                )
                if self._writing:
                    event = skew.event(action_id, effect_key)
                    self._engine.write(
                        lambda txn: record_in_txn(txn, (event,), None), operation="clock_skew"
                    )
        except CtrlrunError as exc:  # an observation: it never changes what the caller gets
            log.warning("ctrlrun.postgres: measuring clock skew failed: %s", exc)
