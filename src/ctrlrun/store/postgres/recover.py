"""The re-read after a COMMIT that went unanswered: a fresh connection, one row, one verdict.

Every branch taken is logged at INFO on the ``ctrlrun.postgres`` logger by name (``A1_OURS``,
``A1_REINSERT``, ``A1_REFUSE``, ``A2_LANDED``, ``A2_REISSUE``, ``A2_REFUSE``), with ``branch``,
``effect_key``, ``operation`` and ``witness`` in the record's ``extra``. No branch is logged
when there is nothing to re-read or the re-read fails: both raise ``AmbiguousWrite`` and
nothing more is written.
"""

from __future__ import annotations

import logging
from typing import Final

import psycopg

from ctrlrun._time import Clock
from ctrlrun.errors import AmbiguityReason, AmbiguousWrite, CtrlrunError
from ctrlrun.store.postgres.connections import Connections
from ctrlrun.store.postgres.txn import PgTxn
from ctrlrun.store.postgres.witness import Evidence, Verdict, refusal

log = logging.getLogger("ctrlrun.postgres")

_MEANING: Final = {
    Verdict.LANDED: "the re-read found this transaction's own row: it committed",
    Verdict.NOT_LANDED: "the re-read found the row as it was before: it did not commit, and"
    " the same transaction is issued once more",
    Verdict.OTHER: "the re-read found a row that is neither ours nor the one we replaced:"
    " refusing as the planner says",
}


class Recovery:
    """Settles lost COMMITs for one store handle."""

    def __init__(
        self,
        connections: Connections,
        queries: dict[str, str],
        *,
        clock: Clock | None,
        schema: str,
    ) -> None:
        self._connections = connections
        self._queries = queries
        self._clock = clock
        self._schema = schema

    def settle(
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
        try:
            txn = PgTxn(
                self._connections.fresh(),
                self._queries,
                schema=self._schema,
                now_source=self._clock,
            )
            row = txn.one(evidence.read_query, evidence.read_params)
            verdict = evidence.judge(row)
            found = None
            if verdict is Verdict.OTHER and _corroborated(txn, evidence.corroboration):
                verdict = Verdict.LANDED  # the row moved on after our COMMIT; the receipt says so
            if verdict is Verdict.OTHER:
                found = refusal(evidence, row, txn.now, txn.read_ts)
        except psycopg.Error as exc:
            raise AmbiguousWrite(
                f"{operation}: the COMMIT went unanswered and the re-read failed ({exc});"
                " refusing: nothing more is written and nothing proceeds",
                reason=AmbiguityReason.REREAD_FAILED,
                operation=operation,
                effect_key=evidence.effect_key,
            ) from exc
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
        return verdict, found


def _corroborated(txn: PgTxn, receipt: Evidence | None) -> bool:
    """True when the receipt this transaction wrote is in the store exactly as written: the
    transaction is atomic, so it committed, whatever became of its effect row since."""
    if receipt is None:
        return False
    return receipt.judge(txn.one(receipt.read_query, receipt.read_params)) is Verdict.LANDED
