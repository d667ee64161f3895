"""The receipt chain: every kind of break is named at its seq."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ctrlrun.canonical import GENESIS_HASH, canonical_text, sha256_hex
from ctrlrun.kernel.receipt import (
    GENESIS_HEAD,
    BreakKind,
    ChainHead,
    StoredReceipt,
    chain_receipt,
    verify_chain,
)


def build(n: int) -> tuple[list[StoredReceipt], ChainHead]:
    rows, head = [], GENESIS_HEAD
    for index in range(n):
        draft = {"receipt_id": f"rcp_{index}", "result": "committed", "amount": index}
        seq, text, digest = chain_receipt(draft, head)
        rows.append(StoredReceipt(seq, f"rcp_{index}", text, digest))
        head = ChainHead(seq, digest)
    return rows, head


def edited(row: StoredReceipt, **changes) -> StoredReceipt:
    document = json.loads(row.text)
    document.update(changes)
    return replace(row, text=canonical_text(document))


def breaks(rows, head):
    return [(str(b.kind), b.seq) for b in verify_chain(rows, head).breaks]


class TestIntactChain:
    def test_a_fresh_chain_verifies(self):
        rows, head = build(5)
        report = verify_chain(rows, head)
        assert report.ok and report.verified == 5 and report.total == 5

    def test_an_empty_chain_at_genesis_verifies(self):
        assert verify_chain([], GENESIS_HEAD).ok

    def test_links_start_at_genesis_and_seq_is_inside_the_content(self):
        rows, _ = build(2)
        first, second = (json.loads(r.text) for r in rows)
        assert first["prev_hash"] == GENESIS_HASH and first["seq"] == 1
        assert second["prev_hash"] == rows[0].hash
        assert rows[0].hash == sha256_hex(rows[0].text.encode())

    def test_row_order_given_does_not_matter(self):
        rows, head = build(4)
        assert verify_chain(list(reversed(rows)), head).ok


class TestBreaks:
    def test_edited_content(self):
        rows, head = build(5)
        rows[2] = edited(rows[2], amount=999)
        assert breaks(rows, head) == [("content_altered", 3)]

    def test_edited_content_with_its_hash_rewritten_breaks_the_next_link(self):
        rows, head = build(5)
        rows[2] = edited(rows[2], amount=999)
        rows[2] = replace(rows[2], hash=sha256_hex(rows[2].text.encode()))
        assert breaks(rows, head) == [("link_broken", 4)]

    def test_edited_hash_column_alone_is_reported_once(self):
        rows, head = build(5)
        rows[1] = replace(rows[1], hash="sha256:" + "1" * 64)
        assert breaks(rows, head) == [("content_altered", 2)]

    def test_missing_hash(self):
        rows, head = build(3)
        rows[1] = replace(rows[1], hash=None)
        assert breaks(rows, head) == [("hash_missing", 2)]

    def test_deleted_from_the_middle(self):
        rows, head = build(5)
        del rows[2]
        assert breaks(rows, head) == [("missing", 3), ("link_broken", 4)]

    def test_reordered_neighbours(self):
        rows, head = build(5)
        rows[1], rows[2] = replace(rows[2], seq=2), replace(rows[1], seq=3)
        found = breaks(rows, head)
        assert found and all(kind == "link_broken" for kind, _ in found)
        assert ("link_broken", 2) in found

    def test_last_receipt_deleted(self):
        rows, head = build(5)
        assert breaks(rows[:-1], head) == [("head_mismatch", 5)]

    def test_head_rewound_with_the_last_receipt(self):
        rows, _ = build(5)
        assert verify_chain(rows[:-1], ChainHead(4, rows[3].hash)).ok  # truncation: not detectable

    def test_missing_head_is_never_ok(self):
        rows, _ = build(2)
        report = verify_chain(rows, None)
        assert not report.breaks and not report.ok

    def test_unchained_rows_are_named_and_never_ok(self):
        rows, head = build(2)
        rows.append(StoredReceipt(None, "rcp_old", "{}", None))
        report = verify_chain(rows, head)
        assert [(b.kind, b.seq) for b in report.breaks] == [(BreakKind.UNCHAINED, None)]
        assert not report.ok and report.verified == 2 and report.total == 3

    def test_text_that_is_not_a_json_object_is_altered_content(self):
        rows, head = build(2)
        rows[0] = StoredReceipt(1, rows[0].receipt_id, "[1]", sha256_hex(b"[1]"))
        assert ("content_altered", 1) in breaks(rows, head)

    def test_garbage_text_with_a_matching_hash_is_altered_content(self):
        rows, head = build(1)
        rows[0] = StoredReceipt(1, "x", "not json", sha256_hex(b"not json"))
        assert breaks(rows, head)[0] == ("content_altered", 1)


@pytest.mark.parametrize("n", [1, 2, 7])
def test_stored_receipt_exposes_its_document(n):
    rows, _ = build(n)
    assert rows[-1]["amount"] == n - 1 and rows[-1].document["seq"] == n
