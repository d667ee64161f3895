"""Reading the recorded receipts as a stream, for reports over the whole history.

``receipt_documents`` pages through the chained receipts in seq order, one short read per page,
so a replay or a report over millions of receipts holds one page at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, Final

from ctrlrun.store.codec import Row
from ctrlrun.store.ops import Txn
from ctrlrun.store.protocol import StateStore

PAGE: Final = 2000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def receipt_documents(
    store: StateStore, since: datetime | None = None, *, page: int = PAGE
) -> Iterator[dict[str, Any]]:
    """Each chained receipt's parsed document recorded at or after ``since`` (every one
    without), chain by chain in seq order. A document that does not parse as a JSON object
    is skipped: the chain verifier, not a report, is where an altered receipt is named."""
    after = (-1, 0)
    start = since or _EPOCH
    while True:
        rows = store.read(partial(_page, after=after, since=start, page=page))
        for row in rows:
            after = (int(row["partition_id"]), int(row["seq"]))
            document = parse_document(row["document"])
            if document is not None:
                yield document
        if len(rows) < page:
            return


def _page(txn: Txn, *, after: tuple[int, int], since: datetime, page: int) -> Sequence[Row]:
    cursor = {"after_partition": after[0], "after": after[1]}
    return txn.all("receipt_page", {**cursor, "since": txn.ts(since), "page": page})


def parse_document(text: Any) -> dict[str, Any] | None:
    """A stored receipt's document as a dict; None if it is not a JSON object."""
    try:
        document = json.loads(text)
    except (TypeError, ValueError):
        return None
    return document if isinstance(document, dict) else None
