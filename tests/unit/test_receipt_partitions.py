"""Partitioned receipt chains (kernel): which chain a receipt belongs to, and that a receipt
is bound to its chain."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import replace
from types import MappingProxyType

import pytest

from ctrlrun.canonical import canonical_text, sha256_hex
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.evidence_check import EvidenceSnapshot, partition_checkpoints, verify_evidence
from ctrlrun.kernel.held import HeldStatus, StoredIndex, check_held
from ctrlrun.kernel.partition import (
    DEFAULT_PARTITIONS_POSTGRES,
    DEFAULT_PARTITIONS_SQLITE,
    MAX_PARTITIONS,
    check_count,
    partition_of,
    receipt_partition,
    stated_partition,
)
from ctrlrun.kernel.receipt import (
    GENESIS_HEAD,
    BreakKind,
    ChainHead,
    ReceiptDraft,
    StoredReceipt,
    chain_receipt,
    describe,
    draft_in_partition,
    place,
    verify_chain,
)


def build(n: int, partition: int) -> tuple[list[StoredReceipt], ChainHead]:
    """``n`` receipts of ``partition``, written as a writer does (no field in partition 0)."""
    rows, head = [], GENESIS_HEAD
    for index in range(n):
        draft: dict[str, object] = {"receipt_id": f"rcp_{partition}_{index}", "n": index}
        if partition:
            draft["partition"] = partition
        seq, text, digest = chain_receipt(draft, head)
        rows.append(StoredReceipt(seq, f"rcp_{partition}_{index}", text, digest))
        head = ChainHead(seq, digest)
    return rows, head


def rehashed(row: StoredReceipt, **changes: object) -> StoredReceipt:
    """``row`` rewritten with ``changes`` and a matching hash (only its link can betray it)."""
    document = json.loads(row.text)
    document.update(changes)
    text = canonical_text(document)
    return replace(row, text=text, hash=sha256_hex(text.encode()))


class TestWhichPartition:
    def test_it_is_sha256_of_the_utf8_bytes_mod_the_count(self):
        key = "refund:order-\u00e9-17"
        expected = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest(), "big") % 64
        assert partition_of(key, 64) == expected

    def test_every_retry_of_one_effect_lands_in_one_partition(self):
        # retries share the effect key; their action ids differ
        chosen = {receipt_partition("refund:42", f"act_{i}", 64) for i in range(50)}
        assert chosen == {partition_of("refund:42", 64)}

    def test_without_an_effect_key_the_action_id_decides(self):
        assert receipt_partition(None, "act_7", 64) == partition_of("act_7", 64)

    def test_different_keys_spread_over_every_partition(self):
        counts = Counter(partition_of(f"key-{i}", 8) for i in range(4000))
        assert sorted(counts) == list(range(8))
        assert min(counts.values()) > 400  # 500 expected each

    def test_one_partition_is_always_zero(self):
        assert {partition_of(f"k{i}", 1) for i in range(20)} == {0}

    @pytest.mark.parametrize("count", [0, -1, MAX_PARTITIONS + 1, True, 2.0, "4"])
    def test_a_count_outside_one_to_the_maximum_is_refused(self, count):
        with pytest.raises(InvalidArgument, match="receipt partitions"):
            check_count(count)

    def test_defaults_are_valid_counts(self):
        assert check_count(DEFAULT_PARTITIONS_POSTGRES) == 64
        assert check_count(DEFAULT_PARTITIONS_SQLITE) == 1

    @pytest.mark.parametrize(
        ("document", "stated"),
        [({}, 0), ({"partition": 3}, 3), ({"partition": -1}, None), ({"partition": "3"}, None)],
    )
    def test_a_document_states_its_partition_or_zero(self, document, stated):
        assert stated_partition(document) == stated


class TestBoundToItsChain:
    def test_a_partition_other_than_zero_verifies(self):
        rows, head = build(4, partition=3)
        assert verify_chain(rows, head, partition=3).ok

    def test_old_receipts_without_the_field_are_partition_zero_history(self):
        rows, head = build(3, partition=0)
        assert "partition" not in rows[0].document
        assert verify_chain(rows, head).ok
        assert verify_chain(rows, head, partition=0).ok

    def test_a_chain_verified_as_another_partition_is_broken_at_every_receipt(self):
        rows, head = build(3, partition=3)
        report = verify_chain(rows, head, partition=5)
        assert [(b.kind, b.seq) for b in report.breaks] == [
            (BreakKind.LINK_BROKEN, 1),
            (BreakKind.LINK_BROKEN, 2),
            (BreakKind.LINK_BROKEN, 3),
        ]

    def test_a_rehashed_receipt_claiming_another_partition_is_named_in_its_chain(self):
        rows, _ = build(3, partition=2)
        rows[1] = rehashed(rows[1], partition=4)
        rows[2] = rehashed(rows[2], prev_hash=rows[1].hash)
        head = ChainHead(3, rows[2].hash or "")
        report = verify_chain(rows, head, partition=2)
        assert [(b.kind, b.seq) for b in report.breaks] == [(BreakKind.LINK_BROKEN, 2)]
        assert describe(report.breaks[0], 2) == (
            "receipt 2 of partition 2 does not link to the receipt before it"
        )

    def test_partition_zero_lines_read_as_before(self):
        brk = verify_chain(*build(1, 0), partition=1).breaks[0]
        assert describe(brk, 0) == "receipt 1 does not link to the receipt before it"

    def test_a_break_carries_its_partition(self):
        brk = verify_chain(*build(1, 0), partition=1).breaks[0]
        assert brk.partition == 1
        assert describe(brk) == "receipt 1 of partition 1 does not link to the receipt before it"

    def test_a_null_partition_is_not_partition_zero(self):
        rows, _ = build(2, partition=1)
        moved = [rehashed(rows[0], partition=None)]
        assert not verify_chain(moved, ChainHead(1, moved[0].hash or ""), partition=0).ok

    def test_checkpoint_breaks_name_the_partition(self):
        rows, head = build(4, partition=3)
        report = verify_chain(rows[:2], ChainHead(2, rows[1].hash or ""), checkpoints=[head])
        tail = [b for b in report.breaks if b.kind is BreakKind.TAIL_CUT]
        assert describe(tail[0], 3).startswith("receipts up to seq 4 of partition 3")


def stored(n: int, partition: int) -> tuple[list[StoredReceipt], ChainHead]:
    """``build``'s rows as a store reads them: each with its ``partition_id`` column."""
    rows, head = build(n, partition)
    return [replace(row, partition=partition) for row in rows], head


class TestEveryChainOneVerifier:
    """``kernel.evidence_check`` over a snapshot of several chains (pure: no store)."""

    def snapshot(self, **overrides: object) -> EvidenceSnapshot:
        zero, head0 = stored(2, 0)
        two, head2 = stored(3, 2)
        fields: dict[str, object] = {
            "receipts": tuple(zero + two),
            "head": head0,
            "heads": (head0, GENESIS_HEAD, head2),
        }
        fields.update(overrides)
        return EvidenceSnapshot(**fields)  # type: ignore[arg-type]

    def test_each_chain_is_walked_against_its_own_head(self):
        report = verify_evidence(self.snapshot())
        assert report.ok and report.verified == 5 and report.total == 5
        assert report.partitions == 3 and report.heads[2].seq == 3

    def test_a_break_is_named_in_its_chain(self):
        zero, _head0 = stored(2, 0)
        two, _head2 = stored(3, 2)
        two[1] = replace(two[1], text=two[1].text.replace('"n":1', '"n":7'))
        report = verify_evidence(self.snapshot(receipts=tuple(zero + two)))
        assert [(b.kind, b.partition, b.seq) for b in report.breaks] == [
            (BreakKind.CONTENT_ALTERED, 2, 2)
        ]

    def test_a_row_in_a_chain_the_store_does_not_keep_links_to_nothing(self):
        zero, _head0 = stored(2, 0)
        lost = replace(zero[0], partition=7)
        report = verify_evidence(self.snapshot(receipts=(*zero, lost)))
        assert (BreakKind.LINK_BROKEN, 7, 1) in [
            (b.kind, b.partition, b.seq) for b in report.breaks
        ]

    def test_a_missing_head_is_never_ok(self):
        _zero, head0 = stored(2, 0)
        report = verify_evidence(self.snapshot(heads=(head0, None, stored(3, 2)[1])))
        assert not report.ok

    def test_checkpoints_are_judged_per_chain(self):
        two, head2 = stored(3, 2)
        cut = self.snapshot(
            receipts=tuple(stored(2, 0)[0] + two[:2]),
            heads=(stored(2, 0)[1], GENESIS_HEAD, ChainHead(2, two[1].hash or "")),
            checkpoints={2: [head2]},
        )
        kinds = {(b.kind, b.partition) for b in verify_evidence(cut).breaks}
        assert kinds == {(BreakKind.TAIL_CUT, 2), (BreakKind.HEAD_REWOUND, 2)}

    def test_a_checkpointed_chain_whose_head_row_is_gone_is_a_cut_tail(self):
        _, head5 = stored(2, 5)
        report = verify_evidence(self.snapshot(checkpoints={5: [head5], 0: []}))
        assert [(b.kind, b.partition, b.seq) for b in report.breaks] == [(BreakKind.TAIL_CUT, 5, 2)]
        one = EvidenceSnapshot(*stored(2, 0), checkpoints={3: [head5]})
        assert [(b.kind, b.partition) for b in verify_evidence(one).breaks] == [
            (BreakKind.TAIL_CUT, 3)
        ]

    def test_a_sequence_of_checkpoints_is_partition_0s(self):
        _, head0 = stored(2, 0)
        assert partition_checkpoints([head0], 0) == [head0]
        assert partition_checkpoints([head0], 1) == ()
        assert partition_checkpoints({1: [head0]}, 0) == ()
        assert partition_checkpoints(None, 0) is None


class TestAHeldCopyIsFoundInItsChain:
    def test_a_seq_reused_in_another_chain_is_not_a_replacement(self):
        zero, _ = stored(1, 0)
        two, _ = stored(1, 2)
        held = {**json.loads(two[0].text), "receipt_id": "rcp_other"}
        text = canonical_text(held)
        copy = {**held, "hash": sha256_hex(text.encode())}
        index = StoredIndex([*zero, replace(two[0], receipt_id="rcp_2_0")])
        check = check_held(copy, index)
        assert check.status is HeldStatus.REPLACED and "of partition 2" in check.detail
        assert check_held(copy, StoredIndex(zero)).status is HeldStatus.MISSING


FIELDS = MappingProxyType({"receipt_id": "rcp_1", "action_id": "act_1", "result": "committed"})


class TestADraftStatesItsChain:
    FIELDS = FIELDS

    def test_partition_0_changes_no_byte(self):
        prepared = ReceiptDraft(dict(self.FIELDS), {})
        assert prepared.in_partition(0) is prepared
        assert draft_in_partition(prepared, 0) is prepared
        assert draft_in_partition(self.FIELDS, 0) is self.FIELDS

    def test_a_prepared_draft_and_a_mapping_link_to_the_same_bytes(self):
        head = ChainHead(4, "sha256:" + "a" * 64)
        prepared = draft_in_partition(ReceiptDraft(dict(self.FIELDS), {}), 5)
        plain = draft_in_partition(self.FIELDS, 5)
        assert isinstance(prepared, ReceiptDraft) and plain["partition"] == 5
        assert chain_receipt(prepared, head) == chain_receipt(plain, head)
        assert json.loads(chain_receipt(plain, head)[1])["partition"] == 5


def test_a_place_reads_as_before_on_partition_0_and_names_any_other():
    assert (place(0, 7), place(3, 7), place(3, None)) == ("7", "3:7", "-")


def keyed_chain(
    keys: list[str | None], partition: int, written: int | None
) -> tuple[list[StoredReceipt], ChainHead]:
    """Receipts of ``partition`` for ``keys`` (None: no effect key), each read for
    verification with ``written`` as its write order."""
    rows, head = [], GENESIS_HEAD
    for index, key in enumerate(keys):
        draft: dict[str, object] = {"receipt_id": f"rcp_{index}", "action_id": f"act_{index}"}
        if key is not None:
            draft["effect_key"] = key
        if partition:
            draft["partition"] = partition
        seq, text, digest = chain_receipt(draft, head)
        rows.append(
            StoredReceipt(seq, f"rcp_{index}", text, digest, None, None, partition, written)
        )
        head = ChainHead(seq, digest)
    return rows, head


def hashing_to(partition: int, count: int) -> str:
    return next(f"k{n}" for n in range(1000) if partition_of(f"k{n}", count) == partition)


class TestPlacedByItsKey:
    """A receipt written since partitioning sits in the chain its key (else its action id)
    hashes to; the verifier names one that does not, and exempts older history."""

    def report(self, keys: list[str | None], partition: int, written: int | None) -> list:
        rows, head = keyed_chain(keys, partition, written)
        heads = tuple(head if p == partition else GENESIS_HEAD for p in range(3))
        snapshot = EvidenceSnapshot(tuple(rows), heads[0], heads=heads)
        return [(b.kind, b.partition, b.seq) for b in verify_evidence(snapshot).breaks]

    def test_receipts_placed_by_their_key_or_action_are_not_named(self):
        assert self.report([hashing_to(1, 3), hashing_to(1, 3)], 1, 5) == []
        action = next(n for n in range(100) if partition_of(f"act_{n}", 3) == 0)
        assert self.report([hashing_to(0, 3)] * action + [None], 0, 5) == []

    def test_a_receipt_in_another_chain_than_its_key_hashes_to_is_named(self):
        assert self.report([hashing_to(1, 3), hashing_to(2, 3)], 1, 5) == [
            (BreakKind.LINK_BROKEN, 1, 2)
        ]

    @pytest.mark.parametrize("written", [None, 0, -4])
    def test_history_from_before_partitioning_or_unnumbered_is_exempt(self, written):
        assert self.report([hashing_to(2, 3), hashing_to(1, 3)], 0, written) == []

    def test_a_receipt_already_named_is_not_named_twice(self):
        rows, head = keyed_chain([hashing_to(2, 3)], 1, 5)
        altered = replace(rows[0], text=rows[0].text.replace("rcp_0", "rcp_9"))
        snapshot = EvidenceSnapshot((altered,), None, heads=(GENESIS_HEAD, head, GENESIS_HEAD))
        breaks = [(b.kind, b.partition, b.seq) for b in verify_evidence(snapshot).breaks]
        assert breaks == [(BreakKind.CONTENT_ALTERED, 1, 1)]

    @pytest.mark.parametrize("draft", [{"receipt_id": "r"}, {"receipt_id": "r", "action_id": 7}])
    def test_a_document_without_an_action_id_is_left_to_the_chain(self, draft):
        seq, text, digest = chain_receipt(draft, GENESIS_HEAD)
        row = StoredReceipt(seq, "r", text, digest, None, None, 0, 5)
        snapshot = EvidenceSnapshot((row,), ChainHead(seq, digest), heads=(ChainHead(seq, digest),))
        assert verify_evidence(snapshot).breaks == ()
