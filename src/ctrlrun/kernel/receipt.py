"""Receipts and the hash chain that makes their alteration detectable.

One receipt per action that reached a terminal state, refusals included. Each stored receipt is
the canonical JSON of its document, which carries its own ``seq`` and the previous receipt's
hash (``prev_hash``); its hash is SHA-256 over exactly those stored bytes. A one-row head holds
``(seq, hash)`` of the newest receipt, starting at ``(0, GENESIS_HASH)``. ``verify_chain``
names every break by kind and seq. The chain proves non-alteration, not authorship.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, NamedTuple

from ctrlrun.canonical import GENESIS_HASH, canonical_text, sha256_hex

RECEIPT_SCHEMA: Final = "ctrlrun.receipt/v1"


class ReceiptResult(StrEnum):
    """How the action ended."""

    COMMITTED = "committed"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"
    DENIED = "denied"
    BLOCKED = "blocked"


class BreakKind(StrEnum):
    """The closed set of ways a chain can be broken."""

    CONTENT_ALTERED = "content_altered"
    HASH_MISSING = "hash_missing"
    LINK_BROKEN = "link_broken"
    MISSING = "missing"
    HEAD_MISMATCH = "head_mismatch"
    UNCHAINED = "unchained"


class ChainBreak(NamedTuple):
    """One break: its kind and the seq it was found at (None for an unchained row)."""

    kind: BreakKind
    seq: int | None


class ChainHead(NamedTuple):
    """The head row: the newest receipt's seq and hash."""

    seq: int
    hash: str


GENESIS_HEAD: Final = ChainHead(0, GENESIS_HASH)


@dataclass(frozen=True, slots=True)
class ChainReport:
    """The verdict over a chain. ``ok`` only if nothing is broken and a head exists."""

    breaks: tuple[ChainBreak, ...]
    verified: int
    total: int
    head: ChainHead | None

    @property
    def ok(self) -> bool:
        """No break of any kind, and a head row to compare against."""
        return not self.breaks and self.head is not None


@dataclass(frozen=True, slots=True)
class StoredReceipt:
    """A receipt as a store holds it: the document text exactly as stored, and its columns."""

    seq: int | None
    receipt_id: str
    text: str
    hash: str | None

    @property
    def document(self) -> dict[str, Any]:
        """The parsed document (a fresh copy)."""
        return json.loads(self.text)  # type: ignore[no-any-return]

    def __getitem__(self, key: str) -> Any:
        return self.document[key]


Receipt = StoredReceipt
"""A receipt is read and returned exactly as stored."""


def chain_receipt(draft: Mapping[str, Any], head: ChainHead) -> tuple[int, str, str]:
    """Link ``draft`` after ``head``: returns ``(seq, text, hash)`` to store.

    ``draft`` is the receipt document without ``seq``/``prev_hash``; it must be canonical JSON.
    """
    seq = head.seq + 1
    document = {**draft, "seq": seq, "prev_hash": head.hash}
    text = canonical_text(document)
    return seq, text, sha256_hex(text.encode("utf-8"))


def verify_chain(rows: Iterable[StoredReceipt], head: ChainHead | None) -> ChainReport:
    """Walk ``rows`` (any order; positioned by their ``seq`` column) against ``head``.

    Per chained row at most one of ``hash_missing``, ``content_altered``, ``link_broken``; a
    gap in seq is ``missing`` at the first absent seq; the head disagreeing with the last row is
    ``head_mismatch``; a row without seq is ``unchained``. One altered field or column yields
    exactly one break: after a content break the walk accepts either the stored or the
    recomputed hash as the link to the next row.
    """
    rows = list(rows)
    chained = sorted((r for r in rows if r.seq is not None), key=lambda r: r.seq or 0)
    breaks = [ChainBreak(BreakKind.UNCHAINED, None) for r in rows if r.seq is None]
    expected_seq, links = 1, {GENESIS_HASH}
    verified = 0
    for row in chained:
        seq = row.seq or 0
        if seq > expected_seq:
            breaks.append(ChainBreak(BreakKind.MISSING, expected_seq))
        found, links = _check_row(row, links)
        if found is None:
            verified += 1
        else:
            breaks.append(ChainBreak(found, seq))
        expected_seq = seq + 1
    if head is not None:
        last_seq = chained[-1].seq if chained else 0
        if head.seq != last_seq or head.hash not in links:
            breaks.append(ChainBreak(BreakKind.HEAD_MISMATCH, head.seq))
    return ChainReport(tuple(breaks), verified, len(rows), head)


def _check_row(row: StoredReceipt, links: set[str]) -> tuple[BreakKind | None, set[str]]:
    """One row's break (if any) and the hashes the next row may link to."""
    recomputed = sha256_hex(row.text.encode("utf-8"))
    if row.hash is None:
        return BreakKind.HASH_MISSING, {recomputed}
    document = _parse(row.text)
    if recomputed != row.hash or document is None:
        return BreakKind.CONTENT_ALTERED, {recomputed, row.hash}
    if document.get("prev_hash") not in links or document.get("seq") != row.seq:
        return BreakKind.LINK_BROKEN, {row.hash}
    return None, {row.hash}


def _parse(text: str) -> dict[str, Any] | None:
    try:
        document = json.loads(text)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None
