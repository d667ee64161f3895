"""The protocol's reads over named queries, shared by every SQL backend.

A backend supplies ``_rows(query, params)`` (a named query run outside any write transaction)
and ``_read_ts`` (a timestamp column as an aware UTC datetime); the choice of query and the
decoding of rows are the same everywhere. Reads never transition anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus
from ctrlrun.kernel.effect import EffectRecord, EffectState
from ctrlrun.kernel.event import Event
from ctrlrun.kernel.receipt import ChainHead, ChainReport, Receipt, verify_chain
from ctrlrun.store import codec
from ctrlrun.store.codec import Row


class StoreReads:
    """Mixin: ``get_effect``, ``list_effects``, ``get_approval``, ``list_approvals``,
    ``events``, ``receipts``, ``chain_head`` and ``verify_chain`` of ``StateStore``."""

    def _rows(self, query: str, params: Mapping[str, Any] | None = None) -> Sequence[Row]:
        raise NotImplementedError

    def _read_ts(self, value: Any) -> datetime:
        raise NotImplementedError

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

    def chain_head(self) -> ChainHead | None:
        """See ``StateStore.chain_head``."""
        rows = self._rows("chain_head_get")
        return ChainHead(int(rows[0]["seq"]), rows[0]["hash"]) if rows else None

    def verify_chain(self) -> ChainReport:
        """See ``StateStore.verify_chain``."""
        rows = self._rows("receipt_list_verify")
        return verify_chain(
            (codec.receipt_from_row(r, columns=True) for r in rows), self.chain_head()
        )
