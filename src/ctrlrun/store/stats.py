"""The store's side of ``ctrlrun stats``: keep the rollup of receipts, and read a window of it.

The rollup (``receipt_stats``, migration sqlite 0009 / postgres 0002) counts receipts per hour
and ``RollupKey``, each dimension apart; ``stats_mark`` says up to which seq it has folded.
``refresh_stats`` folds the receipts after the mark a page per write transaction, moving the
mark by compare-and-set so two refreshers never count a receipt twice. A protected call never
touches these tables: whoever reads the stats pays, once per receipt. ``gather_stats`` reads
a window from the rollup plus, without writing, whatever the mark has not reached.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from ctrlrun.errors import StoreError
from ctrlrun.kernel.stats import (
    ApprovalRow,
    Dimension,
    Opened,
    ResolvedRow,
    RollupKey,
    fold_receipts,
    hour_of,
)
from ctrlrun.store.codec import Row
from ctrlrun.store.history import parse_document
from ctrlrun.store.ops import Txn
from ctrlrun.store.protocol import StateStore

PAGE: Final = 5000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class StatsWindow:
    """What the store holds for one window: rollup counts, approvals, resolutions."""

    counts: tuple[tuple[RollupKey, int], ...]
    approvals: tuple[ApprovalRow, ...]
    resolved: tuple[ResolvedRow, ...]
    open_now: int


def refresh_stats(store: StateStore, *, page: int = PAGE) -> int:
    """Fold every receipt after the mark into the rollup; the number folded."""
    folded = 0
    while True:
        done = store.transact(lambda txn: _fold_page(txn, page))
        folded += done
        if done < page:
            return folded


def _fold_page(txn: Txn, page: int) -> int:
    txn.one("stats_mark_lock", {})  # held to commit: refreshers take turns
    rows = _unfolded(txn, (-1, 0), page)
    if not rows:
        return 0
    counts, opened = fold_receipts(_documents(rows))
    _write_counts(txn, counts, opened)
    # each chain's receipts in the page are the first ones past its mark: move it to the last
    last: dict[int, tuple[int, int]] = {}
    for row in rows:
        last[int(row["partition_id"])] = (int(row["mark"]), int(row["seq"]))
    for partition, (mark, seq) in last.items():
        moved = {"partition": partition, "seq": seq, "from_seq": mark}
        if txn.run("stats_mark_set", moved) != 1:
            raise StoreError("the stats mark moved under its lock; nothing was folded")
    return len(rows)


def _write_counts(txn: Txn, counts: Counter[RollupKey], opened: Sequence[Opened]) -> None:
    txn.run_many(
        "stats_add",
        [
            {**key._asdict(), "bucket": txn.ts(key.bucket), "calls": calls}
            for key, calls in counts.items()
        ],
    )
    txn.run_many(
        "stats_ambiguous_add",
        [{**o._asdict(), "opened_at": txn.ts(o.opened_at)} for o in opened],
    )


def gather_stats(
    store: StateStore, since: datetime | None, by: Dimension = Dimension.ACTION
) -> StatsWindow:
    """The window from ``since`` (rounded down to its hour; the whole history without), its
    calls counted under ``by``: the rollup's counts plus the receipts the mark has not
    reached, read without writing."""
    start = hour_of(since) if since is not None else _EPOCH
    return store.read(lambda txn: _window(txn, start, by))


def _window(txn: Txn, start: datetime, by: Dimension) -> StatsWindow:
    params = {"since": txn.ts(start)}
    totals: Counter[RollupKey] = Counter()
    for row in txn.all("stats_counts", {**params, "dimension": str(by)}):
        key = RollupKey(_EPOCH, str(by), *(str(row[f]) for f in _KEY_TEXT))
        totals[key] += int(row["calls"])
    after = (-1, 0)
    while rows := _unfolded(txn, after, PAGE):
        tail, _ = fold_receipts(_documents(rows))
        for key, calls in tail.items():
            if key.bucket >= start and key.dimension == by:
                totals[key._replace(bucket=_EPOCH)] += calls
        after = (int(rows[-1]["partition_id"]), int(rows[-1]["seq"]))
    approvals = tuple(
        ApprovalRow(
            str(r["status"]),
            txn.read_ts(r["created_at"]),
            txn.read_ts(r["expires_at"]),
            txn.read_ts(r["answered_at"]) if r["answered_at"] is not None else None,
        )
        for r in txn.all("stats_approvals", params)
    )
    resolved = tuple(
        ResolvedRow(str(r["state"]), txn.read_ts(r["updated_at"]), txn.read_ts(r["opened_at"]))
        for r in txn.all("stats_resolved", params)
    )
    open_now = len(txn.all("stats_open_ambiguous", {}))
    return StatsWindow(tuple(totals.items()), approvals, resolved, open_now)


_KEY_TEXT: Final = ("name", "decision", "result", "reason")


def _unfolded(txn: Txn, after: tuple[int, int], page: int) -> Sequence[Row]:
    """The receipts past their chain's mark after ``(partition, seq)``, one page."""
    cursor = {"after_partition": after[0], "after": after[1], "page": page}
    return txn.all("stats_unfolded", cursor)


def _documents(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [d for d in (parse_document(row["document"]) for row in rows) if d is not None]
