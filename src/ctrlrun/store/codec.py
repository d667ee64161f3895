"""Rows to records and back, shared by every backend.

A backend hands rows as mappings; timestamps come through the backend's own ``read_ts``
(SQLite stores exact ISO-8601 text, Postgres ``timestamptz``). The texts written as evidence
are ``kernel.evidence_text``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar

from ctrlrun.errors import StoreError
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus
from ctrlrun.kernel.effect import EffectRecord, EffectState
from ctrlrun.kernel.event import Event, EventType
from ctrlrun.kernel.receipt import StoredReceipt


class Row(Protocol):
    """A result row addressable by column name (``sqlite3.Row``, a psycopg dict row)."""

    def __getitem__(self, key: str, /) -> Any: ...


ReadTs = Callable[[Any], datetime]
T = TypeVar("T")


def _readable(what: str, row: Row, key: str, build: Callable[[], T]) -> T:
    """``build()``, or a ``StoreError`` naming the row when a column holds what the record
    cannot (a BLOB, a state no version wrote, broken JSON): a store altered behind its back
    is reported, never answered with a bare ``ValueError``."""
    try:
        # no column of any table holds bytes: a BLOB was written behind the store's back
        blob = next((c for c in _columns(row) if isinstance(row[c], bytes)), None)
        if blob is not None:
            raise TypeError(f"{blob} holds a BLOB")
        return build()
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        value = row[key]
        name = f"<BLOB of {len(value)} bytes>" if isinstance(value, bytes) else repr(value)[:80]
        raise StoreError(
            f"{what} {name} cannot be read ({exc}): the store was altered or damaged",
            unreadable=what,
        ) from exc


def _json(row: Row, column: str, kind: type[T]) -> T:
    """The JSON ``column`` holds, which must be a ``kind`` (an object, a list)."""
    value = json.loads(row[column])
    if not isinstance(value, kind):
        raise TypeError(f"{column} holds {type(value).__name__}, not {kind.__name__}")
    return value


def _columns(row: Row) -> list[str]:
    keys = getattr(row, "keys", None)
    return list(keys()) if keys is not None else []


def _opt_ts(read_ts: ReadTs, value: Any) -> datetime | None:
    return None if value is None else read_ts(value)


def effect_from_row(row: Row, read_ts: ReadTs) -> EffectRecord:
    """An ``EffectRecord`` from an ``effects`` row (``StoreError`` if it cannot be read)."""
    return _readable("effect", row, "effect_key", lambda: _effect(row, read_ts))


def _effect(row: Row, read_ts: ReadTs) -> EffectRecord:
    result_json = row["result_json"]
    return EffectRecord(
        effect_key=row["effect_key"],
        state=EffectState(row["state"]),
        action_id=row["action_id"],
        attempt=int(row["attempt"]),
        created_at=read_ts(row["created_at"]),
        updated_at=read_ts(row["updated_at"]),
        lease_expires_at=_opt_ts(read_ts, row["lease_expires_at"]),
        result=None if result_json is None else json.loads(result_json),
        error=row["error"],
        resolved_by=row["resolved_by"],
        committed_receipt_id=row["committed_receipt_id"],
    )


def approval_from_row(row: Row, read_ts: ReadTs) -> ApprovalRecord:
    """An ``ApprovalRecord`` from an ``approvals`` row (``StoreError`` if it cannot be read)."""
    return _readable("approval", row, "approval_id", lambda: _approval(row, read_ts))


def _approval(row: Row, read_ts: ReadTs) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id=row["approval_id"],
        action_hash=row["action_hash"],
        action=_json(row, "action_json", dict),
        policy_hash=row["policy_hash"],
        status=ApprovalStatus(row["status"]),
        created_at=read_ts(row["created_at"]),
        expires_at=read_ts(row["expires_at"]),
        approver=row["approver"],
        answered_at=_opt_ts(read_ts, row["answered_at"]),
        consumed_at=_opt_ts(read_ts, row["consumed_at"]),
        consumed_by=row["consumed_by"],
        required=int(row["required"]),
        excluded=tuple(_json(row, "excluded_json", list)),
    )


def event_from_row(row: Row, read_ts: ReadTs) -> Event:
    """An ``Event`` from an ``events`` row (``StoreError`` if it cannot be read)."""
    return _readable("event", row, "event_id", lambda: _event(row, read_ts))


def _event(row: Row, read_ts: ReadTs) -> Event:
    return Event(
        event_id=int(row["event_id"]),
        ts=read_ts(row["ts"]),
        type=EventType(row["type"]),
        action_id=row["action_id"],
        effect_key=row["effect_key"],
        approval_id=row["approval_id"],
        data=_json(row, "data_json", dict),
    )


def receipt_from_row(row: Row, *, columns: bool = False) -> StoredReceipt:
    """A ``StoredReceipt`` exactly as stored; with ``columns``, its indexed columns too (the
    row must have them), for verification."""
    seq = row["seq"]
    receipt_id, text, digest = row["receipt_id"], row["document"], row["hash"]
    wrong = [
        _not_text(name, value)
        for name, value in (("receipt_id", receipt_id), ("document", text), ("hash", digest))
        if not isinstance(value, str) and (value is not None or name != "hash")
    ]
    return StoredReceipt(
        seq=None if seq is None else int(seq),
        receipt_id=receipt_id if isinstance(receipt_id, str) else "-",
        text=text if isinstance(text, str) else "",
        hash=digest if isinstance(digest, str) else None,
        columns=(row["action_id"], row["effect_key"], row["result"]) if columns else None,
        unreadable="; ".join(wrong) or None,
        partition=int(row["partition_id"]),
        written=_written(row["written"]) if columns else None,
    )


def _written(value: Any) -> int | None:
    """The write order a verification row carries (None where the store keeps none)."""
    return value if type(value) is int else None


def _not_text(column: str, value: Any) -> str:
    """Why ``value`` cannot be the text ``column`` holds (SQLite lets any column hold a BLOB)."""
    if isinstance(value, bytes):
        return f"{column} holds a BLOB of {len(value)} bytes, not text"
    return f"{column} holds {type(value).__name__}, not text"
