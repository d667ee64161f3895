"""One Postgres write transaction, the two failure rows, and what follows a lost COMMIT.

The rows (seed 000), which must never be merged:

* An exception before the COMMIT took effect — a connect failure, a statement error, a
  constraint violation, a statement timeout, or an error among the statements queued with the
  COMMIT (the server then reports the transaction still open and failed, so COMMIT never ran)
  — and a serialization failure or deadlock (``40001``/``40P01``) anywhere: the write failed,
  nothing was committed. Roll back and raise ``WriteFailed``; it may be retried.
* Any other exception during or after COMMIT — the connection lost, a COMMIT timeout (``57014``
  included), the socket closed before the command tag, ``BaseException`` too — and a COMMIT the
  server answered without confirming its durability (a warning, such as a cancelled synchronous-
  replication wait, or the store's ``commit_timeout`` passed: ``commitwatch``): the outcome is
  unknown. Re-read on a fresh connection and let the witness decide (``_reread``): landed → the
  transaction's own result; not landed → issue the same transaction once more (a second unknown
  raises ``AmbiguousWrite``; a re-issue refused by what it met gets one more look, writing
  nothing, in case the first COMMIT was still in flight); anything else → the planner's refusal.
  A re-read that fails raises ``AmbiguousWrite(reread_failed)`` and writes nothing. A landed
  write on a server whose COMMITs wait for synchronous standbys counts only once its replication
  is confirmed (``replication.confirm_replicated``); otherwise ``AmbiguousWrite(unreplicated)``.

A refusal raised as ``KeptRefusal`` commits what the transaction wrote, then raises the refusal
(the expired lease written AMBIGUOUS, the expired approval written EXPIRED).

A folded reservation that met its key wrote nothing and answered with the record it met
(``PgTxn.met``): its COMMIT ended an empty transaction, which is not counted, and the engine
raises ``GuardMissed`` with that record, as for a CR001 but without the ``ROLLBACK``.

Every branch a re-read takes is logged at INFO on the ``ctrlrun.postgres`` logger by name
(``A1_OURS``, ``A1_REINSERT``, ``A1_REFUSE``, ``A2_LANDED``, ``A2_REISSUE``, ``A2_REFUSE``),
with ``branch``, ``effect_key``, ``operation`` and ``witness`` in the record's ``extra``. No
branch is logged when there is nothing to re-read or the re-read fails: both raise
``AmbiguousWrite`` and nothing more is written.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Generic, TypeVar

import psycopg
from psycopg import pq

from ctrlrun._time import Clock
from ctrlrun.errors import (
    AmbiguityReason,
    AmbiguousWrite,
    CtrlrunError,
    StoreError,
    WriteFailed,
)
from ctrlrun.errors.replication import ReplicationRefused
from ctrlrun.store.ops import KeptRefusal
from ctrlrun.store.postgres.commitwatch import WATCH, Unconfirmed
from ctrlrun.store.postgres.connections import Connection, Connections
from ctrlrun.store.postgres.durability import Durability
from ctrlrun.store.postgres.replication import ReplicationGuard, confirm_replicated
from ctrlrun.store.postgres.txn import PgTxn
from ctrlrun.store.postgres.witness import GUARD_SQLSTATE, Evidence, GuardMissed, Verdict, refusal

T = TypeVar("T")

STATED_ABORTS: Final = frozenset({"40001", "40P01"})
"""The server said, in band, that it rolled the transaction back: a failed write, not unknown."""

log = logging.getLogger("ctrlrun.postgres")

_MEANING: Final = {
    Verdict.LANDED: "the re-read found this transaction's own row: it committed",
    Verdict.NOT_LANDED: "the re-read found the row as it was before: it did not commit, and"
    " the same transaction is issued once more",
    Verdict.OTHER: "the re-read found a row that is neither ours nor the one we replaced:"
    " refusing as the planner says",
}


@dataclass(slots=True)
class Attempt(Generic[T]):
    """One run of a transaction: committed, or unknown at COMMIT (``cause`` says why)."""

    txn: PgTxn
    result: T | None
    kept: KeptRefusal | None
    unknown: bool = False
    cause: BaseException | None = None

    def outcome(self) -> T:
        """The transaction's result, or its kept refusal raised."""
        if self.kept is not None:
            raise self.kept.refusal from None
        return self.result  # type: ignore[return-value]


class Engine:
    """Runs write transactions and reads for one store handle."""

    def __init__(
        self,
        connections: Connections,
        queries: dict[str, str],
        *,
        clock: Clock | None,
        schema: str,
        where: str,
        durability: Durability | None = None,
        guard: ReplicationGuard | None = None,
        partitions: int = 1,
    ) -> None:
        self.connections = connections
        self.partitions = partitions  # the store's receipt chains, read at open
        self.durability = durability or Durability()
        self.guard = guard
        self.queries = queries
        self.clock = clock
        self.schema = schema
        self.where = where
        self.committed = 0
        self._commits = itertools.count(1)

    # --- writes --------------------------------------------------------------------------

    def write(self, work: Callable[[PgTxn], T], *, operation: str) -> T:
        """Run ``work`` in one transaction under the failure rows (module docstring)."""
        first = self._attempt(work, operation)
        if not first.unknown:
            return first.outcome()
        if isinstance(first.cause, Exception):
            return self._settle(work, operation, first)
        # An interrupt (KeyboardInterrupt, SystemExit, …) during COMMIT still interrupts: the
        # re-read records which branch the store was in, but nothing more is issued.
        interrupt = first.cause
        assert interrupt is not None
        try:
            self._verdict(first, operation)
        finally:
            raise interrupt

    def _verdict(self, first: Attempt[T], operation: str) -> tuple[Verdict, Exception | None]:
        verdict, refused = self._reread(first.txn.witness.evidence(), operation, first.cause)
        if verdict is Verdict.LANDED:
            self.committed = next(self._commits)
        return verdict, refused

    def _reread(
        self, evidence: Evidence | None, operation: str, cause: BaseException | None
    ) -> tuple[Verdict, CtrlrunError | None]:
        """Re-read ``evidence``'s row on a fresh connection and judge it; return the verdict
        and, for ``OTHER``, the refusal to raise. ``AmbiguousWrite`` when nothing can be
        re-read or the re-read fails."""
        if evidence is None:
            log.warning(
                "ctrlrun.postgres: %s: the COMMIT went unanswered (%r) and the transaction"
                " wrote no row a re-read can recognise; its outcome is unknown",
                operation,
                cause,
                extra={"operation": operation},
            )
            raise AmbiguousWrite(
                f"{operation}: the COMMIT went unanswered and nothing it wrote can be re-read;"
                " the outcome is unknown",
                reason=AmbiguityReason.NO_WITNESS,
                operation=operation,
            ) from cause
        conn: Connection | None = None
        try:
            conn = self.connections.fresh()
            verdict, found = self._judge(conn, evidence, operation)
        except (psycopg.Error, ReplicationRefused) as exc:
            if conn is not None:  # it may be left inside the confirmation's transaction
                self.connections.discard(conn)
            raise AmbiguousWrite(
                f"{operation}: the COMMIT went unanswered and the re-read failed ({exc});"
                " refusing: nothing more is written and nothing proceeds",
                reason=AmbiguityReason.REREAD_FAILED,
                operation=operation,
                effect_key=evidence.effect_key,
            ) from exc
        _log_branch(evidence, verdict, operation, cause)
        return verdict, found

    def _judge(
        self, conn: Connection, evidence: Evidence, operation: str
    ) -> tuple[Verdict, CtrlrunError | None]:
        """The re-read on ``conn``: the verdict, and for ``OTHER`` the refusal. A landed write
        on a server whose COMMITs wait for standbys must also be confirmed replicated."""
        txn = self._reader(conn)
        row = txn.one(evidence.read_query, evidence.read_params)
        verdict = evidence.judge(row)
        found = None
        if verdict is Verdict.OTHER and _corroborated(txn, evidence.corroboration):
            verdict = Verdict.LANDED  # the row moved on after our COMMIT; the receipt says so
        if verdict is Verdict.OTHER:
            found = refusal(evidence, row, txn.now, txn.read_ts)
        if verdict is Verdict.LANDED:
            doubt = confirm_replicated(conn, self.queries, self.durability.commit_timeout)
            if doubt:
                self.connections.discard(conn)
                log.warning(
                    "ctrlrun.postgres: %s: the write committed on the primary, and its"
                    " replication to the synchronous standbys is unconfirmed (%s)",
                    operation,
                    doubt,
                    extra={"operation": operation, "effect_key": evidence.effect_key},
                )
                raise AmbiguousWrite(
                    f"{self.where}: {operation}: the write committed on the primary but its"
                    f" replication is unconfirmed ({doubt}); a failover now could lose it:"
                    " the outcome is unknown",
                    reason=AmbiguityReason.UNREPLICATED,
                    operation=operation,
                    effect_key=evidence.effect_key,
                )
        return verdict, found

    def _settle(self, work: Callable[[PgTxn], T], operation: str, first: Attempt[T]) -> T:
        evidence = first.txn.witness.evidence()
        verdict, planned = self._verdict(first, operation)
        if verdict is Verdict.LANDED:
            return first.outcome()
        if verdict is Verdict.OTHER:
            if first.kept is not None:  # the refusal stands whoever moved the row meanwhile
                raise first.kept.refusal from first.cause
            assert planned is not None
            raise planned from first.cause
        try:
            second = self._attempt(work, operation)
        except CtrlrunError as refused:  # a refusal, or a failed re-issue: nothing committed
            return self._second_look(first, operation, refused)
        if second.unknown:
            raise AmbiguousWrite(
                f"{self.where}: {operation}: the COMMIT went unanswered twice; the outcome is"
                " unknown",
                reason=AmbiguityReason.REISSUE_UNKNOWN,
                operation=operation,
                effect_key=evidence.effect_key if evidence else None,
            ) from second.cause
        return second.outcome()

    def _second_look(self, first: Attempt[T], operation: str, refused: CtrlrunError) -> T:
        """The re-issue did not commit: refused by what it met, or failed. The first COMMIT may
        have been still in flight when the re-read ran (the re-issue then waited on its row):
        look once more, writing nothing; if the first landed after all, it is ours. Otherwise
        the re-issue's exception stands."""
        try:
            verdict, _ = self._verdict(first, operation)
        except AmbiguousWrite:
            raise refused from None
        if verdict is Verdict.LANDED:
            return first.outcome()
        raise refused from None

    def _attempt(self, work: Callable[[PgTxn], T], operation: str) -> Attempt[T]:
        conn = self._connection(operation)
        txn = self._begin(conn, operation)
        kept: KeptRefusal | None = None
        result: T | None = None
        try:
            result = work(txn)
        except KeptRefusal as exc:
            kept = exc
        except BaseException as exc:
            self._rollback(conn)
            if isinstance(exc, psycopg.Error):
                raise self._failed(operation, exc) from exc
            raise
        return self._commit(conn, txn, result, kept, operation)

    def _commit(
        self,
        conn: Connection,
        txn: PgTxn,
        result: T | None,
        kept: KeptRefusal | None,
        operation: str,
    ) -> Attempt[T]:
        try:
            tag, doubt = WATCH.run(conn, txn.commit, self.durability.commit_timeout)
        except psycopg.Error as exc:
            if _failed_in_band(conn, exc):
                self._rollback(conn)
                raise self._failed(operation, exc) from exc
            self.connections.discard(conn)
            return Attempt(txn, result, kept, unknown=True, cause=exc)
        except BaseException as exc:  # interrupted mid-protocol: the connection is unusable
            self.connections.discard(conn)
            return Attempt(txn, result, kept, unknown=True, cause=exc)
        if tag != "COMMIT":  # the server answered COMMIT with ROLLBACK: it failed in band
            raise WriteFailed(
                f"{self.where}: {operation}: the server rolled the transaction back ({tag})",
                operation=operation,
            )
        met = txn.met()
        if met is not None:  # it wrote nothing and said why: nothing to doubt, no ROLLBACK
            if doubt:
                self.connections.discard(conn)
            raise GuardMissed(
                f"{self.where}: {operation}: nothing was committed: a folded conditional write"
                " met a record",
                operation=operation,
                detail=met,
            )
        if doubt:  # committed here, durability unconfirmed: as unknown as a lost answer
            self.connections.discard(conn)
            return Attempt(txn, result, kept, unknown=True, cause=Unconfirmed(doubt))
        self.committed = next(self._commits)  # next() is atomic; += across threads is not
        return Attempt(txn, result, kept)

    def _connection(self, operation: str) -> Connection:
        try:
            return self.connections.current()
        except psycopg.Error as exc:
            raise self._failed(operation, exc) from exc

    def _begin(self, conn: Connection, operation: str) -> PgTxn:
        """A transaction whose ``BEGIN`` travels with its first statement (or its COMMIT):
        nothing is sent yet, so nothing can fail here."""
        txn = PgTxn(
            conn,
            self.queries,
            schema=self.schema,
            now=self.clock() if self.clock else None,
            partitions=self.partitions,
        )
        txn.defer_begin()
        return txn

    def _reader(self, conn: Connection) -> PgTxn:
        """A read (or a re-read) on ``conn``: its clock is read when first asked for."""
        return PgTxn(
            conn,
            self.queries,
            schema=self.schema,
            now_source=self.clock,
            partitions=self.partitions,
        )

    def _rollback(self, conn: Connection) -> None:
        """End a failed transaction. A connection that cannot roll back is discarded, never
        reused, and the error is not raised: the exception that failed the transaction is the
        one to report, and a server whose client went away aborts the transaction itself."""
        try:
            if not conn.broken and conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
        except psycopg.Error:
            self.connections.discard(conn)
        except BaseException:
            self.connections.discard(conn)
            raise
        if conn.broken:
            self.connections.discard(conn)

    def _failed(self, operation: str, exc: psycopg.Error) -> WriteFailed:
        message = f"{self.where}: {operation}: nothing was committed: {exc}"
        if exc.sqlstate == GUARD_SQLSTATE:
            return GuardMissed(message, operation=operation, detail=exc.diag.message_detail)
        return WriteFailed(message, sqlstate=exc.sqlstate, operation=operation)

    # --- reads ---------------------------------------------------------------------------

    def read(self, work: Callable[[PgTxn], T]) -> T:
        """Run ``work`` outside any transaction (autocommit reads); ``StoreError`` on failure."""
        try:
            conn = self.connections.current()
            txn = self._reader(conn)
            return work(txn)
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: read failed: {exc}") from exc

    def rows(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """All rows of named ``query``, read outside any transaction."""
        return self.read(lambda txn: txn.all(query, params or {}))

    def server_clock(self) -> datetime:
        """The server's wall clock (``clock_timestamp()``), whatever clock the store uses."""
        row = self.rows("clock_read")[0]
        return PgTxn.read_ts(row["server_now"])


def _failed_in_band(conn: Connection, exc: psycopg.Error) -> bool:
    """True when the server itself reported that the transaction did not commit.

    Either an in-band abort (``40001``/``40P01``), or an error among the statements sent
    ahead of COMMIT in the same message: the server then skipped the rest, COMMIT included,
    and reports the transaction open and failed (``INERROR``). Anything else — the COMMIT's
    own error, a lost connection — leaves the outcome unknown.
    """
    if exc.sqlstate in STATED_ABORTS:
        return True
    if conn.broken:
        return False
    return conn.info.transaction_status == pq.TransactionStatus.INERROR


def _corroborated(txn: PgTxn, receipt: Evidence | None) -> bool:
    """True when the receipt this transaction wrote is in the store exactly as written: the
    transaction is atomic, so it committed, whatever became of its effect row since."""
    if receipt is None:
        return False
    return receipt.judge(txn.one(receipt.read_query, receipt.read_params)) is Verdict.LANDED


def _log_branch(
    evidence: Evidence, verdict: Verdict, operation: str, cause: BaseException | None
) -> None:
    """The branch a re-read took, by name (see the module docstring)."""
    branch = evidence.branch(verdict)
    log.info(
        "%s: %s on %s %r: the COMMIT went unanswered (%s); %s",
        branch,
        operation,
        evidence.kind,
        evidence.effect_key or next(iter(evidence.read_params.values())),
        type(cause).__name__,
        _MEANING[verdict],
        extra={
            "branch": branch,
            "effect_key": evidence.effect_key,
            "operation": operation,
            "witness": evidence.kind,
        },
    )
