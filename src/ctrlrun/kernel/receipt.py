"""Receipts and the hash chain that makes their alteration detectable.

One receipt per action that reached a terminal state, refusals included. Each stored receipt is
the canonical JSON of its document, which carries its own ``seq`` and the previous receipt's
hash (``prev_hash``); its hash is SHA-256 over exactly those stored bytes. A store keeps one
chain per partition (``kernel.partition``); each chain's head row holds ``(seq, hash)`` of its
newest receipt, starting at ``(0, GENESIS_HASH)``. ``verify_chain``
names every break by kind and seq. The chain proves non-alteration, not authorship.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any, Final, NamedTuple

from ctrlrun.canonical import GENESIS_HASH, canonical_text, sha256_hex, string_text
from ctrlrun.kernel.partition import PARTITION_FIELD, stated_partition

RECEIPT_SCHEMA: Final = "ctrlrun.receipt/v1"


class ReceiptResult(StrEnum):
    """How the action ended."""

    COMMITTED = "committed"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"
    DENIED = "denied"
    BLOCKED = "blocked"
    OBSERVED = "observed"  # mode: observe: the function ran, nothing was enforced


class BreakKind(StrEnum):
    """The closed set of ways a chain can be broken."""

    CONTENT_ALTERED = "content_altered"
    HASH_MISSING = "hash_missing"
    LINK_BROKEN = "link_broken"
    MISSING = "missing"
    HEAD_MISMATCH = "head_mismatch"
    UNCHAINED = "unchained"
    COLUMN_MISMATCH = "column_mismatch"
    UNREADABLE = "unreadable"
    """A column holds what no receipt can (a BLOB in a text column): the row is not read."""
    # A receipt's approval, checked against the approvals and grants stored
    # (``kernel.evidence_check``): at the seq of the receipt that cites it.
    APPROVAL_REUSED = "approval_reused"  # cited by more than one committed receipt
    APPROVAL_MISSING = "approval_missing"  # no such request, or an approved call cites none
    APPROVAL_MISMATCH = "approval_mismatch"  # the request binds another action hash
    APPROVAL_UNSIGNED = "approval_unsigned"  # the policy names approvers; no grant verifies
    APPROVAL_QUORUM = "approval_quorum"  # fewer distinct (non-requester) approvers than needed
    # against signed checkpoints (kernel/checkpoint.py): only when checkpoints are given
    TAIL_CUT = "tail_cut"
    HEAD_REWOUND = "head_rewound"
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"
    ANCHOR_UNPROVEN = "anchor_unproven"


class ChainBreak(NamedTuple):
    """One break: its kind, the seq it was found at (None for an unchained row) and the
    partition (chain) it is in."""

    kind: BreakKind
    seq: int | None
    partition: int = 0


class ChainHead(NamedTuple):
    """The head row: the newest receipt's seq and hash."""

    seq: int
    hash: str


GENESIS_HEAD: Final = ChainHead(0, GENESIS_HASH)

_BREAK_TEXT: Final = {
    BreakKind.CONTENT_ALTERED: "the stored receipt {seq} does not hash to its hash",
    BreakKind.HASH_MISSING: "receipt {seq} has no hash",
    BreakKind.LINK_BROKEN: "receipt {seq} does not link to the receipt before it",
    BreakKind.MISSING: "receipt {seq} is missing from the chain",
    BreakKind.HEAD_MISMATCH: "the head row (seq {seq}) is not the last receipt",
    BreakKind.UNCHAINED: "a receipt has no seq",
    BreakKind.COLUMN_MISMATCH: "receipt {seq}'s indexed columns differ from its document",
    BreakKind.UNREADABLE: "receipt {seq}'s row holds what no receipt can (a BLOB in a text"
    " column): it cannot be read",
    BreakKind.TAIL_CUT: "receipts up to seq {seq} of partition {partition} were checkpointed"
    " and are missing",
    BreakKind.HEAD_REWOUND: "the head of partition {partition} (seq {seq}) is behind a signed"
    " checkpoint: it was rewound",
    BreakKind.CHECKPOINT_MISMATCH: "receipt {seq} of partition {partition} is not the one a"
    " signed checkpoint states: the chain was rewritten at or before seq {seq}",
    BreakKind.ANCHOR_UNPROVEN: "partition {partition} starts after seq {seq} (pruned), and no"
    " signed checkpoint states that start",
    BreakKind.APPROVAL_REUSED: "receipt {seq} spends an approval an earlier committed receipt"
    " spent: it ran twice on one grant",
    BreakKind.APPROVAL_MISSING: "receipt {seq} cites an approval the store does not hold (or"
    " an approved call cites none)",
    BreakKind.APPROVAL_MISMATCH: "receipt {seq} cites an approval for another action",
    BreakKind.APPROVAL_UNSIGNED: "receipt {seq} cites an approval with no grant signed by an"
    " approver the policy names",
    BreakKind.APPROVAL_QUORUM: "receipt {seq} cites an approval with fewer distinct approvers"
    " than its policy asks",
}


def place(partition: int, seq: int | None) -> str:
    """Where a receipt sits, as people read it: its seq (``-`` without one), prefixed ``P:``
    in a partition other than 0, so partition 0's places read as they always have."""
    if seq is None:
        return "-"
    return f"{partition}:{seq}" if partition else str(seq)


def describe(brk: ChainBreak, partition: int | None = None) -> str:
    """One line saying what ``brk`` means, for a person. A break in a partition other than 0
    (``brk.partition`` unless ``partition`` is given) names it ("receipt 5 of partition 3
    ..."); partition 0's lines read as they always have."""
    partition = brk.partition if partition is None else partition
    text = _BREAK_TEXT[brk.kind]
    if partition and "{partition}" not in text:
        text = text.replace("receipt {seq}", "receipt {seq} of partition {partition}", 1)
    return text.format(seq="-" if brk.seq is None else brk.seq, partition=partition)


@dataclass(frozen=True, slots=True)
class ChainReport:
    """The verdict over a chain. ``ok`` only if nothing is broken and a head exists.

    ``anchor`` is where the stored chain starts: genesis, or after a prune the checkpointed
    ``(seq, hash)`` the oldest remaining receipt links to. ``checkpointed`` is the newest
    signed checkpoint it was checked against (None when no checkpoints were given)."""

    breaks: tuple[ChainBreak, ...]
    verified: int
    total: int
    head: ChainHead | None
    anchor: ChainHead = GENESIS_HEAD
    checkpointed: ChainHead | None = None
    heads: tuple[ChainHead | None, ...] = ()
    """Every partition's head, 0, 1, … (empty: one chain, ``head``). ``head``, ``anchor`` and
    ``checkpointed`` are partition 0's."""

    @property
    def ok(self) -> bool:
        """No break of any kind, and a head row to compare against in every partition."""
        return not self.breaks and self.head is not None and None not in self.heads

    @property
    def partitions(self) -> int:
        """How many chains were verified."""
        return max(len(self.heads), 1)


@dataclass(frozen=True, slots=True)
class StoredReceipt:
    """A receipt as a store holds it: the document text exactly as stored, and its columns."""

    seq: int | None
    receipt_id: str
    text: str
    hash: str | None
    columns: tuple[str, str | None, str] | None = None
    """The indexed columns ``(action_id, effect_key, result)`` when read for verification:
    queries filter on them, so they must say what the hashed document says."""
    unreadable: str | None = None
    """Why the row cannot be read as a receipt (a column of the wrong type), or None. An
    unreadable row's ``document`` raises ``ValueError``; a column that is not text reads as
    ``""`` (``text``), ``"-"`` (``receipt_id``) or None (``hash``)."""
    partition: int = 0
    """The chain the store keeps the row in (its ``partition_id`` column)."""
    written: int | None = None
    """Its write order, when read for verification by a store that keeps one: above 0 for a
    receipt written since the store's chains were partitioned (placed by its key's hash)."""

    _parsed: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def document(self) -> dict[str, Any]:
        """The parsed document (a fresh copy: changing it changes nothing stored)."""
        if self.unreadable is not None:
            raise ValueError(self.unreadable)
        return json.loads(self.text)  # type: ignore[no-any-return]

    def __getitem__(self, key: str) -> Any:
        """One field of the document, which is parsed once per receipt; a list or object
        comes back as a copy."""
        parsed = self._parsed
        if parsed is None:
            parsed = self.document
            object.__setattr__(self, "_parsed", parsed)
        value = parsed[key]
        return copy.deepcopy(value) if isinstance(value, dict | list) else value


Receipt = StoredReceipt
"""A receipt is read and returned exactly as stored."""


_LINK_KEYS: Final = ("prev_hash", "seq")


class ReceiptDraft(Mapping[str, Any]):
    """A receipt document (without ``seq``/``prev_hash``) whose canonical text is prepared in
    three parts around the two values only the chain knows, so linking it under the head's
    lock costs two string joins instead of a validating encode of the whole document.

    ``texts`` gives the canonical JSON text of a value already known as text (the action's
    arguments and principal); every other value must be a ``str``, an ``int``, ``None`` or
    plain data. Read-only, so the parts cannot drift from the values.
    """

    __slots__ = ("_fields", "_parts", "_texts")

    def __init__(self, fields: dict[str, Any], texts: Mapping[str, str]) -> None:
        self._fields = fields
        self._texts = texts
        self._parts: tuple[str, str, str] | None = None
        layout = _layout(tuple(fields))
        if layout is None:
            return  # linking replaces a key it holds: leave it to the validating path
        before, between, after = layout
        self._parts = (
            _segment_text(before, fields, texts),
            _segment_text(between, fields, texts),
            _segment_text(after, fields, texts),
        )

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        """``Mapping.get`` without its Python-level ``__getitem__`` and ``KeyError``."""
        return self._fields.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def in_partition(self, partition: int) -> ReceiptDraft:
        """This draft stating ``partition`` (``kernel.partition``): partition 0 states
        nothing, so its bytes are the draft's own."""
        if not partition:
            return self
        return ReceiptDraft({**self._fields, PARTITION_FIELD: partition}, self._texts)

    def linked_text(self, seq: int, prev_hash: str) -> str | None:
        """The canonical text of the document with ``seq`` and ``prev_hash``, or None when it
        cannot be composed (then ``chain_receipt`` encodes the whole document)."""
        if self._parts is None:
            return None
        before, between, after = self._parts
        link = f'"prev_hash":{string_text(prev_hash)}'
        if before and between and after:  # every Control receipt: one f-string, no filter
            return f'{{{before},{link},{between},"seq":{seq},{after}}}'
        return "{" + _join(before, link, between, f'"seq":{seq}', after) + "}"


Layout = tuple[
    tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]
]


@lru_cache(maxsize=64)
def _layout(keys: tuple[str, ...]) -> Layout | None:
    """For a draft's keys: the keys (with their encoded ``"key":`` prefix, and the comma before
    it for all but a segment's first) in canonical order, in three segments around
    ``prev_hash`` and ``seq``; None if the draft holds either. Drafts of one kind share their
    keys, so this is computed once per kind."""
    if _LINK_KEYS[0] in keys or _LINK_KEYS[1] in keys:
        return None
    segments: list[list[tuple[str, str]]] = [[]]
    for key in sorted((*keys, *_LINK_KEYS)):
        if key in _LINK_KEYS:
            segments.append([])
        else:
            comma = "," if segments[-1] else ""
            segments[-1].append((key, comma + string_text(key) + ":"))
    before, between, after = (tuple(segment) for segment in segments)
    return before, between, after


def _join(*parts: str) -> str:
    return ",".join(part for part in parts if part)


def _segment_text(
    segment: tuple[tuple[str, str], ...], fields: Mapping[str, Any], texts: Mapping[str, str]
) -> str:
    """The ``"key":value`` pairs of ``segment``, comma-joined. The scalar cases are tested
    inline, in the order a receipt's values take them, rather than through a function per
    value: ~20 values per receipt, 6.3 -> 4.3 us per draft (measured 5 December 2026). Each
    prefix (its comma included) and value is a part of one join: a string built per pair
    cost ~200 instructions more a value (52k -> 48k a draft, callgrind, 6 December 2026)."""
    out: list[str] = []
    for key, prefix in segment:
        value = fields[key]
        kind = type(value)
        out.append(prefix)
        if kind is str:
            out.append(string_text(value))
        elif value is None:
            out.append("null")
        elif (text := texts.get(key)) is not None:  # a value already known as text
            out.append(text)
        elif kind is int:
            out.append(int.__repr__(value))
        else:
            out.append(canonical_text(value))  # validates (a float is refused here)
    return "".join(out)


def draft_in_partition(draft: Mapping[str, Any], partition: int) -> Mapping[str, Any]:
    """``draft`` stating ``partition``: partition 0 states nothing (its bytes are unchanged);
    a ``ReceiptDraft`` keeps its prepared parts."""
    if not partition:
        return draft
    if isinstance(draft, ReceiptDraft):
        return draft.in_partition(partition)
    return {**draft, PARTITION_FIELD: partition}


def chain_receipt(draft: Mapping[str, Any], head: ChainHead) -> tuple[int, str, str]:
    """Link ``draft`` after ``head``: returns ``(seq, text, hash)`` to store.

    ``draft`` is the receipt document without ``seq``/``prev_hash``; it must be canonical JSON.
    A ``ReceiptDraft`` is composed from its prepared parts (the same bytes).
    """
    seq = head.seq + 1
    if isinstance(draft, ReceiptDraft):
        text = draft.linked_text(seq, head.hash)
        if text is not None:
            try:
                return seq, text, sha256_hex(text.encode("utf-8"))
            except UnicodeEncodeError:
                pass  # a lone surrogate: the validating path below names where
    document = {**draft, "seq": seq, "prev_hash": head.hash}
    text = canonical_text(document)
    return seq, text, sha256_hex(text.encode("utf-8"))


def verify_chain(
    rows: Iterable[StoredReceipt],
    head: ChainHead | None,
    *,
    anchor: ChainHead | None = None,
    checkpoints: Sequence[ChainHead] | None = None,
    partition: int = 0,
) -> ChainReport:
    """Walk ``rows`` (any order; positioned by their ``seq`` column) against ``head``.

    Per chained row at most one of ``hash_missing``, ``content_altered``, ``link_broken``,
    ``column_mismatch`` (an indexed column or the receipt id differs from the document); a
    gap in seq is ``missing`` at the first absent seq; the head disagreeing with the last row is
    ``head_mismatch``; a row without seq is ``unchained``; a row whose columns hold what no
    receipt can (``StoredReceipt.unreadable``) is ``unreadable``. One altered field or column yields
    exactly one break: after a content break the walk accepts either the stored or the
    recomputed hash as the link to the next row.

    The walk starts at ``anchor`` (genesis when None; after a prune, the checkpointed head the
    oldest remaining receipt links to). With ``checkpoints`` (the ``(seq, hash)`` heads that
    signed checkpoints state, already verified), also: a checkpointed seq beyond the last row
    is ``tail_cut`` at the newest checkpointed seq; a head row behind it ``head_rewound``; a
    stored receipt whose hash is not the one a checkpoint states for its seq
    ``checkpoint_mismatch`` (a rewrite at or before it); an anchor no checkpoint states
    ``anchor_unproven``. Checkpoints before the anchor state pruned receipts and are skipped.

    ``rows`` and ``head`` are one partition's chain (``partition``, 0 by default). A receipt
    whose document states another partition (``kernel.partition``; no field is partition 0)
    is ``link_broken`` at its seq: the partition is bound like ``seq`` and ``prev_hash``, so a
    receipt moved into another chain is named there.
    """
    start = anchor or GENESIS_HEAD
    rows = list(rows)
    chained = sorted((r for r in rows if r.seq is not None), key=lambda r: r.seq or 0)
    breaks = [ChainBreak(BreakKind.UNCHAINED, None) for r in rows if r.seq is None]
    expected_seq, links = start.seq + 1, {start.hash}
    verified = 0
    for row in chained:
        seq = row.seq or 0
        if seq > expected_seq:
            breaks.append(ChainBreak(BreakKind.MISSING, expected_seq))
        found, links = _check_row(row, links, partition)
        if found is None:
            verified += 1
        else:
            breaks.append(ChainBreak(found, seq))
        expected_seq = seq + 1
    last_seq = (chained[-1].seq or 0) if chained else start.seq
    if head is not None and (head.seq != last_seq or head.hash not in links):
        breaks.append(ChainBreak(BreakKind.HEAD_MISMATCH, head.seq))
    newest = None
    if checkpoints is not None:
        breaks += _against_checkpoints(chained, last_seq, head, start, checkpoints)
        newest = max(checkpoints, default=None)
    if partition:
        breaks = [brk._replace(partition=partition) for brk in breaks]
    return ChainReport(tuple(breaks), verified, len(rows), head, start, newest)


def as_of_head(
    rows: Sequence[StoredReceipt], before: ChainHead | None, after: ChainHead | None
) -> list[StoredReceipt]:
    """The rows to judge against ``before``, the head read before them, when ``after`` (read
    after them) moved on: the receipts in ``(before.seq, after.seq]`` were appended while the
    rows were read, and are left out (every receipt up to ``before.seq`` committed before it
    was read, so none is missing). Rows beyond ``after`` and rows without a seq stay: no
    writer put them there. When the head did not move, every row."""
    if before is None or after is None or after.seq <= before.seq:
        return list(rows)
    return [r for r in rows if r.seq is None or not before.seq < r.seq <= after.seq]


def _against_checkpoints(
    chained: Sequence[StoredReceipt],
    last_seq: int,
    head: ChainHead | None,
    start: ChainHead,
    checkpoints: Sequence[ChainHead],
) -> list[ChainBreak]:
    """The breaks that only signed checkpoints can show (see ``verify_chain``)."""
    found: list[ChainBreak] = []
    if start != GENESIS_HEAD and start not in checkpoints:
        found.append(ChainBreak(BreakKind.ANCHOR_UNPROVEN, start.seq))
    stored = {
        row.seq: row.hash or sha256_hex(row.text.encode("utf-8"))
        for row in chained
        if row.seq is not None
    }
    stored[start.seq] = start.hash
    for seq, digest in sorted(set(checkpoints)):
        if seq >= start.seq and stored.get(seq, digest) != digest:
            found.append(ChainBreak(BreakKind.CHECKPOINT_MISMATCH, seq))
    newest = max((c.seq for c in checkpoints), default=0)
    if newest > last_seq:
        found.append(ChainBreak(BreakKind.TAIL_CUT, newest))
    if head is not None and head.seq < newest:
        found.append(ChainBreak(BreakKind.HEAD_REWOUND, head.seq))
    return found


def _check_row(
    row: StoredReceipt, links: set[str], partition: int
) -> tuple[BreakKind | None, set[str]]:
    """One row's break (if any) and the hashes the next row may link to."""
    if row.unreadable is not None:  # what is readable of it may still link the next row
        readable = {row.hash, sha256_hex(row.text.encode("utf-8")) if row.text else None}
        return BreakKind.UNREADABLE, {link for link in readable if link is not None}
    recomputed = sha256_hex(row.text.encode("utf-8"))
    if row.hash is None:
        return BreakKind.HASH_MISSING, {recomputed}
    document = _parse(row.text)
    if recomputed != row.hash or document is None:
        return BreakKind.CONTENT_ALTERED, {recomputed, row.hash}
    if (
        document.get("prev_hash") not in links
        or document.get("seq") != row.seq
        or stated_partition(document) != partition
    ):
        return BreakKind.LINK_BROKEN, {row.hash}
    if _columns_differ(row, document):
        return BreakKind.COLUMN_MISMATCH, {row.hash}
    return None, {row.hash}


def _columns_differ(row: StoredReceipt, document: dict[str, Any]) -> bool:
    if document.get("receipt_id") != row.receipt_id:
        return True
    if row.columns is None:
        return False
    said = (document.get("action_id"), document.get("effect_key"), document.get("result"))
    return said != row.columns


def _parse(text: str) -> dict[str, Any] | None:
    try:
        document = json.loads(text)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None
