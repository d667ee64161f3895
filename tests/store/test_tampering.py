"""Receipts altered in the database itself (SQLite file, Postgres schema) are reported by kind
and seq."""

from __future__ import annotations

import pytest


@pytest.fixture
def chained(backend):
    store = backend.open()
    for index in range(5):
        store.record(
            (),
            {
                "receipt_id": f"rcp_{index}",
                "action_id": f"act_{index}",
                "result": "committed",
                "amount": 100 * index,
            },
        )
    store.close()
    return backend


def tamper(backend, *statements):
    backend.tamper(*statements)


def breaks(backend):
    return [(str(b.kind), b.seq) for b in backend.open().verify_chain().breaks]


def test_untampered_verifies(chained):
    assert chained.open().verify_chain().ok


def test_an_edited_receipt(chained):
    tamper(
        chained,
        "UPDATE receipts SET document = replace(document, '\"amount\":200',"
        " '\"amount\":9999') WHERE seq = 3",
    )
    assert breaks(chained) == [("content_altered", 3)]


def test_a_receipt_deleted_from_the_middle(chained):
    tamper(chained, "DELETE FROM receipts WHERE seq = 3")
    assert breaks(chained) == [("missing", 3), ("link_broken", 4)]


def test_two_receipts_reordered(chained):
    tamper(
        chained,
        "UPDATE receipts SET seq = -2 WHERE seq = 2",
        "UPDATE receipts SET seq = 2 WHERE seq = 3",
        "UPDATE receipts SET seq = 3 WHERE seq = -2",
    )
    found = breaks(chained)
    assert ("link_broken", 2) in found and {kind for kind, _ in found} == {"link_broken"}


def test_the_last_receipt_deleted(chained):
    tamper(chained, "DELETE FROM receipts WHERE seq = 5")
    assert breaks(chained) == [("head_mismatch", 5)]


def test_a_cleared_hash(chained):
    tamper(chained, "UPDATE receipts SET hash = NULL WHERE seq = 2")
    assert breaks(chained) == [("hash_missing", 2)]


def test_a_row_appended_behind_the_heads_back(chained):
    # both stores key receipts by seq (decision 0019): a forged row takes the next number
    tamper(
        chained,
        "INSERT INTO receipts (seq, receipt_id, action_id, result, document, created_at)"
        " VALUES (6, 'rcp_forged', 'a', 'committed', '{}', '2020-01-01')",
    )
    assert breaks(chained) == [("hash_missing", 6), ("head_mismatch", 5)]


def test_a_deleted_head_is_never_ok(chained):
    tamper(chained, "DELETE FROM receipt_chain")
    report = chained.open().verify_chain()
    assert not report.ok and report.head is None


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE receipts SET result = 'failed' WHERE seq = 2",
        "UPDATE receipts SET action_id = 'act_other' WHERE seq = 2",
        "UPDATE receipts SET effect_key = 'refund:someone_else' WHERE seq = 2",
        "UPDATE receipts SET receipt_id = 'rcp_other' WHERE seq = 2",
    ],
    ids=["result", "action_id", "effect_key", "receipt_id"],
)
def test_an_indexed_column_edited_away_from_its_document(chained, edit):
    """Queries filter on these columns (`receipts --action`, the committed-receipt lookup), so
    a column that disagrees with the hashed document is a named break at its seq."""
    tamper(chained, edit)
    assert breaks(chained) == [("column_mismatch", 2)]
