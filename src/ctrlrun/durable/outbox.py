"""The outbox: messages enqueued in the caller's own transaction, claimed, fenced, settled.

``pending → processing → sent | failed | dead`` (a retry is ``pending`` again with
``attempts > 0``), plus ``ambiguous`` for a parking topic's unknown outcomes. A claim bumps
``attempts``; ``attempts`` is the fence: only the claim that set it may settle the message
(``outbox_settle … AND attempts = :attempts``, row count checked), so a worker whose lapsed
claim was reclaimed can neither complete nor fail it. Leases are stamped and compared on the
transaction's clock (the store's; on Postgres the server's).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ctrlrun.canonical import new_id
from ctrlrun.durable.base import (
    DurableStore,
    aware_or_none,
    check_name,
    json_text,
    lease_params,
    seconds,
    stamp,
)
from ctrlrun.durable.records import message_from_row
from ctrlrun.errors import ClaimLost, InvalidArgument
from ctrlrun.kernel.approval import check_reason
from ctrlrun.kernel.outbox import (
    Message,
    MessageStatus,
    OnUnknown,
    Settlement,
    check_resolution,
    plan_lapsed,
)
from ctrlrun.store.ops import Txn


class Outbox:
    """The outbox of one store: its dialect and schema, and the reads and writes on messages.

    ``enqueue_in_txn`` runs on the caller's own connection inside the caller's transaction;
    everything else runs in the store's own transactions.
    """

    def __init__(self, store: DurableStore) -> None:
        self.store = store
        self.dialect = store.dialect
        self.schema = store.schema

    def enqueue_in_txn(
        self,
        conn: Any,
        topic: str,
        payload: Any,
        *,
        key: str | None = None,
        available_at: datetime | None = None,
    ) -> str:
        """Insert a PENDING message through ``conn`` (the caller's sqlite3 or psycopg
        connection, inside the caller's open transaction); return its id.

        Nothing is committed here: the message commits with the caller's own writes or not at
        all. With ``key``, a second enqueue of the same ``(topic, key)`` returns the first
        message's id and inserts nothing (a unique index decides, not a prior read). The
        connection must be to the store's own database. Raises ``InvalidArgument`` for a
        payload without canonical JSON form or a connection that would autocommit.
        """
        params = self._enqueue_params(topic, payload, key, available_at)
        changed, _ = self.store.execute_on(conn, "outbox_enqueue", params)
        if changed == 1:
            return str(params["message_id"])
        _, rows = self.store.execute_on(conn, "outbox_by_key", {"topic": topic, "dedupe_key": key})
        if not rows:
            raise InvalidArgument(f"outbox message {params['message_id']} was not inserted")
        return str(rows[0]["message_id"])

    def enqueue(
        self,
        topic: str,
        payload: Any,
        *,
        key: str | None = None,
        available_at: datetime | None = None,
        conn: Any = None,
    ) -> str:
        """Insert a PENDING message; return its id. With ``conn`` (the caller's connection, in
        its open transaction) this is ``enqueue_in_txn``: the message commits with the caller's
        writes or not at all. Without it, in a transaction of the store's own."""
        if conn is not None:
            return self.enqueue_in_txn(conn, topic, payload, key=key, available_at=available_at)
        params = self._enqueue_params(topic, payload, key, available_at)

        def work(txn: Txn) -> str:
            params["now"] = txn.ts(txn.now)
            params["available_at"] = txn.ts(available_at) if available_at else None
            if txn.run("outbox_enqueue", params) == 1:
                return str(params["message_id"])
            row = txn.one("outbox_by_key", {"topic": topic, "dedupe_key": key})
            assert row is not None
            return str(row["message_id"])

        return self.store.transact(work)

    def _enqueue_params(
        self, topic: str, payload: Any, key: str | None, available_at: datetime | None
    ) -> dict[str, Any]:
        check_name(topic, "topic")
        if key is not None:
            check_name(key, "key")
        available_at = aware_or_none(available_at, "available_at")
        params = {
            "message_id": new_id("msg"),
            "topic": topic,
            "payload_json": json_text(payload),
            "dedupe_key": key,
            "available_at": available_at,
            "now": None,  # the store's clock: the server's on Postgres, its own on SQLite
        }
        return params

    # --- reads and reconciliation ---------------------------------------------------------

    def get(self, message_id: str) -> Message | None:
        """The message, or None."""
        return self.store.read(lambda txn: get_message_in_txn(txn, message_id))

    def list(self, status: MessageStatus | str | None = None) -> tuple[Message, ...]:
        """Messages oldest first, optionally only those in ``status``."""
        wanted = None if status is None else str(MessageStatus(status))

        def work(txn: Txn) -> tuple[Message, ...]:
            rows = txn.all("outbox_list", {"status": wanted})
            return tuple(message_from_row(row, txn.read_ts) for row in rows)

        return self.store.read(work)

    def resolve(
        self,
        message_id: str,
        status: MessageStatus | str,
        *,
        resolver: str,
        reason: str | None = None,
    ) -> Message:
        """A verdict on a parked (AMBIGUOUS) or DEAD message: SENT (it was delivered), FAILED
        (it was not, and must not be), or PENDING (send it again). Any other status is refused
        (``InvalidArgument``) and nothing is written; the write is conditional on the status
        and attempts read, so a message that moved meanwhile is ``ClaimLost``. Who
        (``resolver``) and why (``reason``) are kept in the message's ``last_error``."""
        target = MessageStatus(status)
        check_name(resolver, "resolver")
        why = f": {check_reason(reason)}" if reason is not None else ""

        def work(txn: Txn) -> Message:
            message = get_message_in_txn(txn, message_id)
            check_resolution(message, message_id, target)
            assert message is not None
            error = f"resolved {target} by {resolver}{why} (was: {message.last_error})"
            params = stamp(
                txn,
                message_id=message_id,
                status=str(target),
                from_status=str(message.status),
                attempts=message.attempts,
                error=error,
            )
            if txn.run("outbox_resolve", params) != 1:
                raise _lost(message_id, message.attempts)
            moved = get_message_in_txn(txn, message_id)
            assert moved is not None
            return moved

        return self.store.transact(work)


# --- work inside a transaction -------------------------------------------------------------


def get_message_in_txn(txn: Txn, message_id: str) -> Message | None:
    """The message as this transaction sees it."""
    row = txn.one("outbox_get", {"message_id": message_id})
    return None if row is None else message_from_row(row, txn.read_ts)


def topics_json(topics: Iterable[str] | None) -> str | None:
    """The topic filter as one JSON parameter (both dialects expand it in SQL)."""
    return None if topics is None else json.dumps(sorted(topics))


def claim_in_txn(
    txn: Txn,
    *,
    worker: str,
    topics: Iterable[str] | None,
    batch: int,
    lease: timedelta,
    max_attempts: int,
    on_unknown: Mapping[str, OnUnknown],
    default_unknown: OnUnknown,
) -> tuple[Message, ...]:
    """Reclaim lapsed claims, then claim up to ``batch`` due messages for ``worker``.

    A lapsed PROCESSING message's delivery outcome is unknown: ``plan_lapsed`` sends it back to
    PENDING (due at once), DEAD, or, on a parking topic, AMBIGUOUS. Each reclaim is a fenced
    write on the attempts it found; one that matches no row lost a race and is skipped. The
    claim itself bumps ``attempts`` and stamps the lease (Postgres: ``FOR UPDATE SKIP LOCKED``).
    """
    wanted = topics_json(topics)
    lapsed = txn.all("outbox_lapsed", stamp(txn, topics_json=wanted, batch=batch))
    for row in lapsed:
        message = message_from_row(row, txn.read_ts)
        policy = on_unknown.get(message.topic, default_unknown)
        settlement = plan_lapsed(message, max_attempts=max_attempts, on_unknown=policy)
        settle_in_txn(txn, message, settlement, strict=False)
    params = stamp(txn, topics_json=wanted, batch=batch, worker=worker, **lease_params(txn, lease))
    rows = txn.all("outbox_claim", params)
    claimed = [message_from_row(row, txn.read_ts) for row in rows]
    return tuple(sorted(claimed, key=lambda m: (m.next_attempt_at, m.created_at, m.message_id)))


def settle_in_txn(
    txn: Txn, message: Message, settlement: Settlement, *, strict: bool = True
) -> bool:
    """Write ``settlement`` for the claim ``message.attempts``: the fenced terminal write.

    Returns True if it landed. A write that matches no row means the claim was reclaimed (or
    already settled): with ``strict`` that raises ``ClaimLost`` and nothing is written.
    """
    delay = None
    if settlement.next_attempt_at is not None:
        delay = max(seconds(settlement.next_attempt_at - txn.now), 0.0)
    params = stamp(
        txn,
        message_id=message.message_id,
        attempts=message.attempts,
        status=str(settlement.status),
        next_attempt_at=txn.ts(settlement.next_attempt_at),
        delay_seconds=delay,
        error=settlement.error,
    )
    if txn.run("outbox_settle", params) == 1:
        return True
    if strict:
        raise _lost(message.message_id, message.attempts)
    return False


def _lost(message_id: str, attempts: int) -> ClaimLost:
    return ClaimLost(
        f"outbox message {message_id}: claim {attempts} no longer holds it (reclaimed or"
        " settled); nothing written",
        kind="outbox",
        target=message_id,
        claim=attempts,
    )
