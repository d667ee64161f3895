"""Long-running external operations: one in flight per resource, started once, then polled.

* **Submit**: a ``queued`` row; a unique index on ``idempotency_key`` returns the existing
  operation for a repeated key, and a partial unique index on ``resource`` (``queued`` or
  ``running``) refuses a second one in flight (``OperationInFlight``).
* **Start**: ``queued → running`` is the only door to the remote start, one conditional write
  per operation, so the start is issued at most once. The remote id is recorded by a write
  guarded on ``status = 'running'`` and the claim. A start that raised anything but
  ``NotExecuted`` has an unknown outcome: the operation is flagged for reconciliation, never
  started again (the starter got ``start_token`` to hand the remote as its idempotency key,
  and the poller can find it by that token).
* **Poll**: each poll claims the operation under a lease (only if no live claim holds it),
  asks the remote, and writes the answer guarded on ``status = 'running'`` and that claim.
* **Reap**: a running operation whose claim lapsed loses the claim (and is flagged if its start
  is unknown). Nothing is ever re-issued.

External effects are **at-most-once** per operation: the start is behind a claim that happens
once, and a lost reply is answered by polling or reconciliation, not by a second start.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ctrlrun._time import check_positive
from ctrlrun.canonical import new_id
from ctrlrun.durable.base import (
    DurableStore,
    check_name,
    json_text,
    lease_params,
    stamp,
)
from ctrlrun.durable.records import operation_from_row
from ctrlrun.errors import ClaimLost, InvalidArgument, NotExecuted, OperationInFlight, StoreError
from ctrlrun.kernel.approval import check_person
from ctrlrun.kernel.evidence_text import result_json
from ctrlrun.kernel.operation import (
    DEFAULT_OPERATION_LEASE,
    UNKNOWN_START,
    Operation,
    OperationStatus,
    PollResult,
    PollState,
    ReapAction,
    check_same_request,
    plan_reap,
)
from ctrlrun.runtime.receipts import describe
from ctrlrun.store.ops import Txn

log = logging.getLogger("ctrlrun.durable")

Starter = Callable[[Operation], str]
"""Issues the remote start (pass ``operation.start_token`` as its idempotency key) and returns
the remote id. ``NotExecuted``: nothing was started. Anything else: unknown."""

Poller = Callable[[Operation], PollResult]
"""Asks the remote how the operation stands (by ``remote_id``, or by ``start_token`` when the
start's outcome is unknown: a ``PollResult`` carrying ``remote_id`` records what it found)."""


class Operations:
    """The long-running operations of one store. ``lease`` bounds one start or one poll."""

    def __init__(
        self,
        store: DurableStore,
        *,
        lease: timedelta = DEFAULT_OPERATION_LEASE,
        worker: str | None = None,
    ) -> None:
        self.store = store
        self.lease = check_positive(lease, "lease")
        self.worker = worker or new_id("wrk")

    # --- submit ------------------------------------------------------------------------------

    def submit(
        self,
        kind: str,
        resource: str,
        arguments: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> Operation:
        """Queue an operation, or return the one ``idempotency_key`` already names.

        Raises ``OperationInFlight`` if another operation on ``resource`` is queued or running,
        and ``InvalidArgument`` if the key names an operation with a different request.
        """
        check_name(kind, "kind")
        check_name(resource, "resource")
        if idempotency_key is not None:
            check_name(idempotency_key, "idempotency_key")
        arguments_json = json_text({} if arguments is None else arguments)
        operation_id = new_id("op")

        def work(txn: Txn) -> Operation:
            params = stamp(
                txn,
                operation_id=operation_id,
                kind=kind,
                resource=resource,
                arguments_json=arguments_json,
                idempotency_key=idempotency_key,
            )
            if txn.run("op_insert", params) == 1:
                return _get(txn, operation_id)
            if idempotency_key is not None:
                row = txn.one("op_by_key", {"idempotency_key": idempotency_key})
                if row is not None:
                    existing = operation_from_row(row, txn.read_ts)
                    check_same_request(existing, kind, resource, json.loads(arguments_json))
                    return existing
            row = txn.one("op_in_flight", {"resource": resource})
            if row is not None:
                raise OperationInFlight(
                    f"{resource} already has operation {row['operation_id']} {row['status']}",
                    resource=resource,
                    operation_id=row["operation_id"],
                )
            raise StoreError(f"operation {operation_id} was neither inserted nor found")

        return self.store.transact(work)

    # --- start ---------------------------------------------------------------------------------

    def start(self, operation_id: str, starter: Starter) -> Operation:
        """Issue the remote start if, and only if, this call moves the operation ``queued →
        running``; otherwise return it as it stands (it is never started twice)."""
        claimed = self.store.transact(
            lambda txn: self._claim_in_txn(
                txn, operation_id, OperationStatus.QUEUED, "op_claim_start"
            )
        )
        if claimed is None:
            return self._require(operation_id)
        try:
            remote_id = starter(claimed)
        except NotExecuted as exc:
            return self._write(
                claimed,
                "op_settle",
                status=str(OperationStatus.FAILED),
                result_json=None,
                error=describe(exc),
                remote_id=None,
            )
        except BaseException as exc:
            flagged = self._write(
                claimed,
                "op_flag",
                strict=False,
                reconcile=UNKNOWN_START.format(epoch=claimed.claim_epoch, worker=self.worker),
                error=describe(exc),
            )
            if not isinstance(exc, Exception):
                raise
            return flagged
        if not isinstance(remote_id, str) or not remote_id:
            raise InvalidArgument(f"the starter returned {remote_id!r}, not a remote id")
        try:
            return self._write(claimed, "op_record_start", remote_id=remote_id)
        except ClaimLost:
            log.warning(
                "ctrlrun: operation %s started as %s but its claim was lost; settle it"
                " with resolve_start(remote_id=%r)",
                operation_id,
                remote_id,
                remote_id,
            )
            raise

    def _claim_in_txn(
        self, txn: Txn, operation_id: str, door: OperationStatus, query: str
    ) -> Operation | None:
        """Claim ``operation_id`` through ``query`` if it is in ``door``; None when it is not,
        or when the conditional write matched no row (a concurrent start won the only door;
        a live poll claim holds it)."""
        current = _get(txn, operation_id)
        if current.status is not door:
            return None
        params = stamp(
            txn,
            operation_id=operation_id,
            worker=self.worker,
            epoch=current.claim_epoch,
            **lease_params(txn, self.lease),
        )
        if txn.run(query, params) != 1:
            return None
        return _get(txn, operation_id)

    # --- poll ----------------------------------------------------------------------------------

    def poll(self, operation_id: str, poller: Poller) -> Operation:
        """Claim a poll (unless a live claim holds the operation), ask the remote, and write the
        answer under that claim. A final operation, or one held by a live claim, is returned
        unpolled. Raises ``ClaimLost`` if this poll's claim was taken over before it wrote."""
        claimed = self.store.transact(
            lambda txn: self._claim_in_txn(
                txn, operation_id, OperationStatus.RUNNING, "op_claim_poll"
            )
        )
        if claimed is None:
            return self._require(operation_id)
        try:
            answer = poller(claimed)
        except BaseException:
            self._write(claimed, "op_release", strict=False, remote_id=None)
            raise
        if answer.state is PollState.RUNNING:
            return self._write(claimed, "op_release", remote_id=answer.remote_id)
        return self._write(
            claimed,
            "op_settle",
            status=str(OperationStatus(answer.state.value)),
            result_json=result_json(answer.result),
            error=answer.error,
            remote_id=answer.remote_id,
        )

    # --- reap, cancel, resolve -------------------------------------------------------------------

    def reap(self, *, batch: int = 100) -> tuple[Operation, ...]:
        """Drop the lapsed claims of abandoned running operations (flagging an unknown start
        for reconciliation); never restart one. Returns the operations it moved."""

        def work(txn: Txn) -> tuple[Operation, ...]:
            moved = []
            for row in txn.all("op_abandoned", stamp(txn, batch=batch)):
                operation = operation_from_row(row, txn.read_ts)
                action = plan_reap(operation, txn.now)
                if action is None:
                    continue
                reconcile = error = None
                if action is ReapAction.RECONCILE:
                    reconcile = UNKNOWN_START.format(
                        epoch=operation.claim_epoch, worker=operation.claimed_by
                    )
                    error = f"reaped: the claim of {operation.claimed_by} lapsed mid-start"
                params = stamp(
                    txn,
                    operation_id=operation.operation_id,
                    epoch=operation.claim_epoch,
                    reconcile=reconcile,
                    error=error,
                )
                if txn.run("op_reap", params) == 1:
                    moved.append(_get(txn, operation.operation_id))
            return tuple(moved)

        return self.store.transact(work)

    def cancel(self, operation_id: str, *, reason: str) -> Operation:
        """``queued → canceled`` (a running operation is canceled only by the remote)."""
        check_name(reason, "reason")

        def work(txn: Txn) -> Operation:
            params = stamp(txn, operation_id=operation_id, error=f"canceled: {reason}")
            if txn.run("op_cancel", params) != 1:
                current = _get(txn, operation_id)
                raise InvalidArgument(
                    f"operation {operation_id} is {current.status}; only a"
                    " queued operation can be canceled"
                )
            return _get(txn, operation_id)

        return self.store.transact(work)

    def resolve_start(
        self, operation_id: str, *, resolver: str, remote_id: str | None = None
    ) -> Operation:
        """Settle a start whose outcome was unknown: ``remote_id`` found → it is recorded and
        the operation is polled from now on; None (it never started) → FAILED. Never a start."""
        check_person(resolver, "resolver")

        def work(txn: Txn) -> Operation:
            current = _get(txn, operation_id)
            status = OperationStatus.RUNNING if remote_id else OperationStatus.FAILED
            error = f"start resolved by {resolver}: " + (
                f"found as {remote_id}" if remote_id else "it never started"
            )
            params = stamp(
                txn,
                operation_id=operation_id,
                remote_id=remote_id,
                status=str(status),
                error=error,
                epoch=current.claim_epoch,
            )
            if txn.run("op_resolve_start", params) != 1:
                raise InvalidArgument(
                    f"operation {operation_id} has no unknown start to resolve"
                    f" ({current.status}, remote id {current.remote_id})"
                )
            return _get(txn, operation_id)

        return self.store.transact(work)

    # --- reads and the fenced write -------------------------------------------------------

    def get(self, operation_id: str) -> Operation | None:
        """The operation, or None."""

        def work(txn: Txn) -> Operation | None:
            row = txn.one("op_get", {"operation_id": operation_id})
            return None if row is None else operation_from_row(row, txn.read_ts)

        return self.store.read(work)

    def list(self, status: OperationStatus | str | None = None) -> tuple[Operation, ...]:
        """Operations oldest first, optionally only those in ``status``."""
        wanted = None if status is None else str(OperationStatus(status))

        def work(txn: Txn) -> tuple[Operation, ...]:
            rows = txn.all("op_list", {"status": wanted})
            return tuple(operation_from_row(row, txn.read_ts) for row in rows)

        return self.store.read(work)

    def _require(self, operation_id: str) -> Operation:
        operation = self.get(operation_id)
        if operation is None:
            raise InvalidArgument(f"no operation {operation_id}")
        return operation

    def _write(
        self, claimed: Operation, query: str, *, strict: bool = True, **params: Any
    ) -> Operation:
        """One transition guarded on ``running`` and this claim; ``ClaimLost`` if it matched
        no row (with ``strict``), else the operation as it now stands."""

        def work(txn: Txn) -> Operation:
            full = stamp(
                txn,
                operation_id=claimed.operation_id,
                epoch=claimed.claim_epoch,
                worker=self.worker,
                **params,
            )
            if txn.run(query, full) != 1 and strict:
                raise ClaimLost(
                    f"operation {claimed.operation_id}: claim {claimed.claim_epoch} no longer"
                    " holds it; nothing written",
                    kind="operation",
                    target=claimed.operation_id,
                    claim=claimed.claim_epoch,
                )
            return _get(txn, claimed.operation_id)

        return self.store.transact(work)


def _get(txn: Txn, operation_id: str) -> Operation:
    row = txn.one("op_get", {"operation_id": operation_id})
    if row is None:
        raise InvalidArgument(f"no operation {operation_id}")
    return operation_from_row(row, txn.read_ts)
