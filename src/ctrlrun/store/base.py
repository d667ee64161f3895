"""``SQLStore``: every ``StateStore`` method, written once, over what a SQL dialect supplies.

A dialect (``SQLiteStateStore``, ``PostgresStateStore``) supplies the connection-level work:

* ``_write(work, operation)``: ``work(txn)`` in one write transaction, committed; a
  ``KeptRefusal`` commits and raises its refusal, anything else rolls back (``operation``
  names the write in the dialect's errors and logs);
* ``read(work)``: ``work(txn)`` outside any write transaction;
* ``_rows(query, params)`` and ``_read_ts(value)``: a named query's rows, and a timestamp
  column as an aware UTC datetime, for the reads.

Everything else is here: each write is one shared ``store/ops`` function, which asks the
kernel's planner and then writes what it decided; each read is one named query decoded by
``codec``. A dialect may override a method on its hot path, visibly, falling back to the one
here (Postgres folds the protected call's transactions into one message each,
``store/postgres/folded.py``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ctrlrun.errors import StoreError
from ctrlrun.kernel.approval import (
    ApprovalRecord,
    ApprovalRequestDraft,
    ApprovalStatus,
    Grant,
    check_person,
    check_reason,
)
from ctrlrun.kernel.effect import EffectRecord, EffectState
from ctrlrun.kernel.event import Event, EventDraft
from ctrlrun.kernel.evidence_check import (
    ApprovalEvidence,
    Checkpointed,
    EvidenceSnapshot,
    cited_approvals,
    verify_evidence,
)
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.receipt import ChainHead, ChainReport, Receipt, as_of_head
from ctrlrun.store import codec
from ctrlrun.store.codec import Row
from ctrlrun.store.ops import Txn
from ctrlrun.store.ops.actions import finish_action_in_txn, record_in_txn, start_action_in_txn
from ctrlrun.store.ops.approvals import answer_approval_in_txn, put_approval_request_in_txn
from ctrlrun.store.ops.effects import begin_execution_in_txn, resolve_effect_in_txn
from ctrlrun.store.protocol import DriverTxn, FinishRequest, Started, StartRequest

T = TypeVar("T")


class SQLStore:
    """The ``StateStore`` protocol over a dialect's hooks (see the module docstring)."""

    # --- the dialect's hooks ---------------------------------------------------------------

    def _write(self, work: Callable[[Any], T], operation: str) -> T:
        raise NotImplementedError

    def read(self, work: Callable[[Txn], T]) -> T:
        """Run ``work(txn)`` outside any write transaction (it must only read)."""
        raise NotImplementedError

    def _rows(self, query: str, params: Mapping[str, Any] | None = None) -> Sequence[Row]:
        raise NotImplementedError

    def _read_ts(self, value: Any) -> datetime:
        raise NotImplementedError

    # --- writes ------------------------------------------------------------------------------

    def transact(self, work: Callable[[DriverTxn], T]) -> T:
        """Run ``work(txn)`` in one write transaction and return its result.

        ``txn`` is a ``DriverTxn``: ``txn.connection`` and ``txn.schema`` let a caller's own
        SQL (a durable database step) write inside the same transaction. ``KeptRefusal``
        commits and raises its refusal; any other exception rolls back and propagates. How a
        lost COMMIT is settled is the dialect's (docs/postgres.md).
        """
        return self._write(work, "transact")

    def start_action(self, request: StartRequest) -> Started:
        """See ``StateStore.start_action``."""
        return self._write(lambda txn: start_action_in_txn(txn, request), "start_action")

    def finish_action(self, request: FinishRequest) -> Receipt:
        """See ``StateStore.finish_action``."""
        return self._write(lambda txn: finish_action_in_txn(txn, request), "finish_action")

    def record(
        self, events: tuple[EventDraft, ...], receipt: Mapping[str, Any] | None = None
    ) -> Receipt | None:
        """See ``StateStore.record``."""
        return self._write(lambda txn: record_in_txn(txn, events, receipt), "record")

    def begin_execution(self, effect_key: str, action_id: str, attempt: int) -> EffectRecord:
        """See ``StateStore.begin_execution``."""
        return self._write(
            lambda txn: begin_execution_in_txn(
                txn, effect_key=effect_key, action_id=action_id, attempt=attempt
            ),
            "begin_execution",
        )

    def resolve_effect(
        self,
        effect_key: str,
        state: EffectState,
        resolver: str,
        *,
        by: str = "human",
        attempt: int | None = None,
        events: tuple[EventDraft, ...] = (),
        reason: str | None = None,
    ) -> EffectRecord:
        """See ``StateStore.resolve_effect``."""
        target = EffectState(state)
        why = check_reason(reason)
        return self._write(
            lambda txn: resolve_effect_in_txn(
                txn,
                effect_key=effect_key,
                target=target,
                resolver=resolver,
                by=by,
                attempt=attempt,
                events=events,
                reason=why,
            ),
            "resolve_effect",
        )

    def put_approval_request(
        self, draft: ApprovalRequestDraft, events: tuple[EventDraft, ...] = ()
    ) -> ApprovalRecord:
        """See ``StateStore.put_approval_request``."""

        def work(txn: Txn) -> ApprovalRecord:
            record_in_txn(txn, events, None)
            return put_approval_request_in_txn(txn, draft)

        return self._write(work, "put_approval_request")

    def grant_approval(
        self,
        approval_id: str,
        approver: str,
        signature: str | None = None,
        reason: str | None = None,
    ) -> ApprovalRecord:
        """See ``StateStore.grant_approval``."""
        why = check_reason(reason)
        return self._answer(approval_id, approver, grant=True, signature=signature, reason=why)

    def deny_approval(
        self,
        approval_id: str,
        approver: str,
        reason: str | None = None,
        signature: str | None = None,
    ) -> ApprovalRecord:
        """See ``StateStore.deny_approval``."""
        return self._answer(
            approval_id, approver, grant=False, reason=check_reason(reason), signature=signature
        )

    def _answer(
        self,
        approval_id: str,
        approver: str,
        *,
        grant: bool,
        reason: str | None = None,
        signature: str | None = None,
    ) -> ApprovalRecord:
        person = check_person(approver)
        return self._write(
            lambda txn: answer_approval_in_txn(
                txn,
                approval_id=approval_id,
                approver=person,
                grant=grant,
                reason=reason,
                signature=signature,
            ),
            "grant_approval" if grant else "deny_approval",
        )

    # --- reads -------------------------------------------------------------------------------

    def get_effect(self, effect_key: str) -> EffectRecord | None:
        """See ``StateStore.get_effect``."""
        rows = self._rows("effect_get", {"effect_key": effect_key})
        return codec.effect_from_row(rows[0], self._read_ts) if rows else None

    def list_effects(self, state: EffectState | None = None) -> tuple[EffectRecord, ...]:
        """See ``StateStore.list_effects``."""
        rows = (
            self._rows("effect_list")
            if state is None
            else self._rows("effect_list_by_state", {"state": str(EffectState(state))})
        )
        return tuple(codec.effect_from_row(row, self._read_ts) for row in rows)

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        """See ``StateStore.get_approval``."""
        rows = self._rows("approval_get", {"approval_id": approval_id})
        return codec.approval_from_row(rows[0], self._read_ts) if rows else None

    def list_approvals(self, status: ApprovalStatus | None = None) -> tuple[ApprovalRecord, ...]:
        """See ``StateStore.list_approvals``."""
        rows = (
            self._rows("approval_list")
            if status is None
            else self._rows("approval_list_by_status", {"status": str(ApprovalStatus(status))})
        )
        return tuple(codec.approval_from_row(row, self._read_ts) for row in rows)

    def find_approvals(self, action_hash: str, policy_hash: str) -> tuple[ApprovalRecord, ...]:
        """See ``StateStore.find_approvals``."""
        rows = self._rows("approval_find", {"action_hash": action_hash, "policy_hash": policy_hash})
        return tuple(codec.approval_from_row(row, self._read_ts) for row in rows)

    def denial_reason(self, approval_id: str) -> str | None:
        """See ``StateStore.denial_reason``."""
        rows = self._rows("event_denial_reason", {"approval_id": approval_id})
        reason = json.loads(rows[0]["data_json"]).get("reason") if rows else None
        return None if reason is None else str(reason)

    def events(self, action_id: str | None = None) -> tuple[Event, ...]:
        """See ``StateStore.events``."""
        rows = (
            self._rows("event_list")
            if action_id is None
            else self._rows("event_list_by_action", {"action_id": action_id})
        )
        return tuple(codec.event_from_row(row, self._read_ts) for row in rows)

    def receipts(self, action_id: str | None = None) -> tuple[Receipt, ...]:
        """See ``StateStore.receipts``."""
        rows = (
            self._rows("receipt_list")
            if action_id is None
            else self._rows("receipt_list_by_action", {"action_id": action_id})
        )
        return tuple(codec.receipt_from_row(row) for row in rows)

    @property
    def partitions(self) -> int:
        """See ``StateStore.partitions``: one chain unless the dialect keeps more."""
        return 1

    def chain_head(self) -> ChainHead | None:
        """See ``StateStore.chain_head``."""
        rows = self._rows("chain_head_get")
        return _head(rows[0]) if rows else None

    def chain_heads(self) -> tuple[ChainHead | None, ...]:
        """See ``StateStore.chain_heads``."""
        found = {int(row["partition_id"]): _head(row) for row in self._rows("chain_heads_get")}
        count = max(self.partitions, max(found, default=-1) + 1)
        return tuple(found.get(p) for p in range(count))

    def chain_anchor(self) -> ChainHead | None:
        """See ``StateStore.chain_anchor``."""
        return self.chain_anchors().get(0)

    def chain_anchors(self) -> dict[int, ChainHead]:
        """See ``StateStore.chain_anchors``."""
        return {
            int(r["partition_id"]): ChainHead(int(r["seq"]), r["hash"])
            for r in self._rows("anchor_list")
        }

    def verify_chain(
        self,
        policy: Policy | None = None,
        *,
        checkpoints: Checkpointed = None,
    ) -> ChainReport:
        """See ``StateStore.verify_chain``."""
        return verify_evidence(self.evidence_snapshot(policy, checkpoints=checkpoints))

    def evidence_snapshot(
        self,
        policy: Policy | None = None,
        *,
        checkpoints: Checkpointed = None,
    ) -> EvidenceSnapshot:
        """What the verifier judges, in one pass: the heads, the anchors, the rows, the heads
        again. Receipts appended while the rows were read are left to the next verification
        (``as_of_head``, chain by chain), so a busy store is judged as of the first heads,
        never mistaken for a broken one. Then the requests the rows cite, with their grants."""
        before = self.chain_heads()
        anchors = self.chain_anchors()
        rows = [codec.receipt_from_row(r, columns=True) for r in self._rows("receipt_list_verify")]
        after = self.chain_heads()
        chains: dict[int, list[Receipt]] = {}
        for row in rows:
            chains.setdefault(row.partition, []).append(row)
        kept = tuple(
            row
            for p, (first, then) in enumerate(itertools.zip_longest(before, after))
            for row in as_of_head(chains.pop(p, []), first, then)
        ) + tuple(row for stray in chains.values() for row in stray)
        heads = before or (None,)
        return EvidenceSnapshot(
            kept,
            heads[0],
            self._cited(kept),
            policy,
            anchor=anchors.get(0),
            checkpoints=checkpoints,
            heads=heads if len(heads) > 1 else (),
            anchors=anchors,
        )

    def _cited(self, rows: Sequence[Receipt]) -> dict[str, ApprovalEvidence]:
        """The requests ``rows`` cite, each with every grant row it has."""
        cited = cited_approvals(rows)
        if not cited:
            return {}
        grants: dict[str, list[Grant]] = {}
        for row in self._rows("approval_grant_list_all"):
            grant = Grant(row["approver"], self._read_ts(row["granted_at"]), row["signature"])
            grants.setdefault(row["approval_id"], []).append(grant)
        return {
            r.approval_id: ApprovalEvidence(r, tuple(grants.get(r.approval_id, ())))
            for r in self.list_approvals()
            if r.approval_id in cited
        }


def _head(row: Any) -> ChainHead:
    """A head row as read, refused when its columns were written behind the store's back."""
    seq, digest = row["seq"], row["hash"]
    if type(seq) is not int or not isinstance(digest, str):
        raise StoreError(
            "the receipt chain head row cannot be read (its seq or hash has the wrong"
            " type): the store was altered or damaged",
            unreadable="receipt_chain",
        )
    return ChainHead(seq, digest)
