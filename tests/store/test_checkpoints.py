"""Signed checkpoints prove the end of the chain, on both stores (issue 28, docs/checkpoints.md).

A hash chain with no anchor outside the store cannot prove its own end: deleting the newest
receipts and rewinding the head row together leaves a chain that verifies. Each test here
alters the real store behind its back (plain SQL on the SQLite file or the Postgres schema)
after a checkpoint was signed into a file outside it, and asserts the named break."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctrlrun.checkpoints import (
    WebhookSink,
    checkpoint_heads,
    load_checkpoints,
    make_checkpoint,
    stored_checkpoints,
)
from ctrlrun.errors import ChainRefusal, ChainRefused, CheckpointInvalid, CheckpointReason
from ctrlrun.kernel.receipt import ChainHead, describe
from ctrlrun.kernel.signing import generate
from support.webhook_receiver import Receiver

OPERATOR_PEM, OPERATOR_KEY = generate()
MALLORY_PEM, MALLORY_KEY = generate()
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def append(store, first: int, count: int) -> None:
    for index in range(first, first + count):
        store.record(
            (),
            {
                "receipt_id": f"rcp_{index}",
                "action_id": f"act_{index}",
                "result": "committed",
                "amount": 100 * index,
            },
        )


@pytest.fixture
def signed(backend, tmp_path):
    """Five receipts, a checkpoint at seq 5 in a file outside the store, then three more."""
    store = backend.open()
    append(store, 1, 5)
    file = tmp_path / "checkpoints"
    make_checkpoint(store, OPERATOR_PEM, origin="test-store", file=file, now=T0)
    append(store, 6, 3)
    store.close()
    return backend, file


def judged(backend, file: Path):
    heads = checkpoint_heads(load_checkpoints(file, OPERATOR_KEY))
    return backend.open().verify_chain(checkpoints=heads)


def found(report) -> list[tuple[str, int | None]]:
    return [(str(b.kind), b.seq) for b in report.breaks]


def test_an_untouched_chain_verifies_against_its_checkpoint(signed):
    backend, file = signed
    report = judged(backend, file)
    assert report.ok and report.checkpointed is not None and report.checkpointed.seq == 5
    statements = stored_checkpoints(backend.open())
    assert statements == (file.read_text().rstrip("\n") + "\n",)  # the store keeps a copy


def test_a_cut_tail_with_a_rewound_head_is_named(signed):
    backend, file = signed
    rows = backend.open().receipts()
    # the newest four receipts deleted and the head rewound to receipt 4: consistent again
    backend.tamper(
        "DELETE FROM receipts WHERE seq > 4",
        f"UPDATE receipt_chain SET seq = 4, hash = '{rows[3].hash}'",  # the one head row
    )
    assert backend.open().verify_chain().ok  # what every verifier said before checkpoints
    report = judged(backend, file)
    assert found(report) == [("tail_cut", 5), ("head_rewound", 4)]
    assert describe(report.breaks[0]) == (
        "receipts up to seq 5 of partition 0 were checkpointed and are missing"
    )


def test_a_rewrite_before_the_checkpoint_with_every_hash_recomputed_is_named(signed):
    backend, file = signed
    store = backend.open()
    rows = store.receipts()
    # Mallory rebuilds the chain from receipt 2 on with an altered amount: every link and the
    # head are consistent, so the chain alone cannot tell
    backend.tamper("DELETE FROM receipts WHERE seq >= 2")
    backend.tamper(f"UPDATE receipt_chain SET seq = 1, hash = '{rows[0].hash}'")  # the one head row
    fresh = backend.open()
    for index in range(2, 9):
        fresh.record(
            (),
            {
                "receipt_id": f"rcp_{index}",
                "action_id": f"act_{index}",
                "result": "committed",
                "amount": 1 if index == 2 else 100 * index,
            },
        )
    assert fresh.verify_chain().ok
    assert found(judged(backend, file)) == [("checkpoint_mismatch", 5)]


def test_a_checkpoint_signed_by_another_key_is_refused(signed, tmp_path):
    backend, _ = signed
    forged = tmp_path / "forged"
    make_checkpoint(backend.open(), MALLORY_PEM, origin="test-store", file=forged, now=T0)
    with pytest.raises(CheckpointInvalid) as refused:
        load_checkpoints(forged, OPERATOR_KEY)
    assert refused.value.reason is CheckpointReason.UNSIGNED and refused.value.line == 1


def test_a_statement_edited_in_the_file_is_refused(signed):
    backend, file = signed
    text = file.read_text()
    head = backend.open().receipts()[3]
    # the statement now claims only four receipts were checkpointed, with a consistent heads
    # line: only the signature can tell
    from ctrlrun.kernel.checkpoint import PartitionHead, checkpoint_body, read_statements

    (statement,) = read_statements(text)
    edited_body = checkpoint_body(
        "test-store", (PartitionHead(0, 4, head.hash or ""),), statement.checkpoint.time
    )
    file.write_text(text.replace(statement.checkpoint.body, edited_body))
    with pytest.raises(CheckpointInvalid) as refused:
        load_checkpoints(file, OPERATOR_KEY)
    assert refused.value.reason is CheckpointReason.BAD_SIGNATURE


def test_a_second_checkpoint_refuses_to_sign_a_cut_chain(signed):
    backend, file = signed
    rows = backend.open().receipts()
    backend.tamper(
        "DELETE FROM receipts WHERE seq > 3",
        f"UPDATE receipt_chain SET seq = 3, hash = '{rows[2].hash}'",  # the one head row
    )
    before = file.read_text()
    with pytest.raises(ChainRefused) as refused:
        make_checkpoint(backend.open(), OPERATOR_PEM, origin="test-store", file=file)
    assert refused.value.reason is ChainRefusal.CHAIN_BROKEN
    assert "receipts up to seq 5 of partition 0" in refused.value.message
    assert file.read_text() == before  # nothing endorsed, nothing appended


def test_a_checkpoint_of_an_empty_store_states_genesis(backend, tmp_path):
    store = backend.open()
    made = make_checkpoint(store, OPERATOR_PEM, file=tmp_path / "c", now=T0)
    assert made.heads[0].head == store.chain_head() == ChainHead(0, made.heads[0].hash)
    assert store.verify_chain(checkpoints=checkpoint_heads((made,))).ok
    later = make_checkpoint(store, OPERATOR_PEM, file=tmp_path / "c", now=T0 + timedelta(1))
    assert [c.time for c in load_checkpoints(tmp_path / "c", OPERATOR_KEY)] == [T0, later.time]


def test_a_webhook_gets_the_statement_and_one_that_fails_keeps_it_out_of_the_store(
    backend, tmp_path
):
    receiver = Receiver()
    sink = WebhookSink(receiver.start())
    try:
        store = backend.open()
        append(store, 1, 2)
        file = tmp_path / "checkpoints"
        made = make_checkpoint(store, OPERATOR_PEM, file=file, sinks=[sink], now=T0)
        assert [r.body for r in receiver.received] == [
            {"type": "ctrlrun.checkpoint", "origin": "ctrlrun", "statement": made.statement}
        ]
        receiver.statuses.append(503)
        with pytest.raises(ChainRefused) as refused:
            make_checkpoint(store, OPERATOR_PEM, file=file, sinks=[sink], now=T0)
        assert refused.value.reason is ChainRefusal.SINK_FAILED
        assert "the store was not written" in refused.value.message
        assert stored_checkpoints(store) == (made.statement,)
        assert len(load_checkpoints(file, OPERATOR_KEY)) == 2  # the file, written first, has it
    finally:
        receiver.stop()


def test_a_lost_tail_whose_seqs_were_reused_is_named(signed):
    # issue 30's async failover: the new primary lacks receipts 4..8 that callers already
    # hold, and its own next receipts take those seqs; the chain alone verifies
    backend, file = signed
    rows = backend.open().receipts()
    backend.tamper(
        "DELETE FROM receipts WHERE seq > 3",
        f"UPDATE receipt_chain SET seq = 3, hash = '{rows[2].hash}'",  # the one head row
    )
    store = backend.open()
    for index in range(4, 10):
        store.record((), {"receipt_id": f"other_{index}", "action_id": "x", "result": "denied"})
    assert store.verify_chain().ok
    assert found(judged(backend, file)) == [("checkpoint_mismatch", 5)]


def test_a_chain_growing_while_it_is_read_is_judged_as_of_the_first_head(backend, tmp_path):
    # an agent appends right after every read of the rows, before the head is read again (a
    # real second handle, at the point in the verification where a busy store's writers land)
    store, agent = backend.open(), backend.open()
    append(store, 1, 3)
    rows_of = store._rows
    appended = iter(range(100, 200))

    def busy(query, params=None):
        found = rows_of(query, params)
        if query == "receipt_list_verify":
            append(agent, next(appended), 1)
        return found

    store._rows = busy
    report = store.verify_chain()
    assert report.ok and (report.head.seq, report.verified) == (3, 3)
    made = make_checkpoint(store, OPERATOR_PEM, file=tmp_path / "c", now=T0)
    assert made.heads[0].seq == 4  # a scheduled checkpoint is not refused by a busy store
