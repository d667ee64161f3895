"""Notifications enqueued inside the transaction of the event they tell of."""

from __future__ import annotations

from collections.abc import Iterable

from ctrlrun.canonical import canonical_text, new_id
from ctrlrun.kernel.notify import Notice
from ctrlrun.store.ops import Txn


def enqueue_notices_in_txn(txn: Txn, notices: Iterable[Notice]) -> None:
    """One outbox message per notice (a second with the same dedupe key is dropped): if the
    event is written, so are its notifications."""
    for notice in notices:
        txn.run(
            "outbox_enqueue",
            {
                "message_id": new_id("msg"),
                "topic": notice.topic,
                "payload_json": canonical_text(notice.payload),
                "dedupe_key": notice.dedupe_key,
                "available_at": None,
                "now": txn.ts(txn.now),
            },
        )
