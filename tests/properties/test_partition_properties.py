"""Several receipt chains under one verifier (``kernel.evidence_check``): whatever one
tamper does to one chain — an edit, a deletion, two receipts swapped, a receipt moved into
another chain — the verifier names a break in that chain, and every other chain stays
clean; untouched, every chain verifies. Derandomized (the suite's Hypothesis profile)."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from ctrlrun.canonical import canonical_text, sha256_hex
from ctrlrun.kernel.evidence_check import EvidenceSnapshot, verify_evidence
from ctrlrun.kernel.partition import PARTITION_FIELD
from ctrlrun.kernel.receipt import GENESIS_HEAD, ChainHead, StoredReceipt, chain_receipt


def chains(sizes: list[int]) -> tuple[list[list[StoredReceipt]], list[ChainHead]]:
    """One chain per size, partition p's receipts stating p (none on partition 0)."""
    rows: list[list[StoredReceipt]] = []
    heads: list[ChainHead] = []
    for p, size in enumerate(sizes):
        chain, head = [], GENESIS_HEAD
        for n in range(size):
            draft: dict[str, object] = {"receipt_id": f"r{p}_{n}", "v": n}
            if p:
                draft[PARTITION_FIELD] = p
            seq, text, digest = chain_receipt(draft, head)
            chain.append(StoredReceipt(seq, f"r{p}_{n}", text, digest, partition=p))
            head = ChainHead(seq, digest)
        rows.append(chain)
        heads.append(head)
    return rows, heads


def judged(rows: list[list[StoredReceipt]], heads: list[ChainHead]) -> set[int]:
    """The partitions the verifier names a break in."""
    snapshot = EvidenceSnapshot(
        tuple(r for chain in rows for r in chain), heads[0], heads=tuple(heads)
    )
    return {brk.partition for brk in verify_evidence(snapshot).breaks}


sizes = st.lists(st.integers(2, 6), min_size=2, max_size=5)


@given(sizes)
def test_untouched_chains_all_verify(counts):
    rows, heads = chains(counts)
    snapshot = EvidenceSnapshot(
        tuple(r for chain in rows for r in chain), heads[0], heads=tuple(heads)
    )
    report = verify_evidence(snapshot)
    assert report.ok and report.verified == sum(counts)


@given(sizes, st.data())
def test_one_tamper_is_named_in_its_chain_and_nowhere_else(counts, data):
    rows, heads = chains(counts)
    p = data.draw(st.integers(0, len(counts) - 1))
    chain = rows[p]
    i = data.draw(st.integers(0, len(chain) - 2))
    how = data.draw(st.sampled_from(["edit", "delete", "swap", "restate"]))
    if how == "edit":
        document = json.loads(chain[i].text)
        document["v"] = -1
        chain[i] = replace(chain[i], text=canonical_text(document))
    elif how == "delete":
        del chain[i]
    elif how == "swap":  # two stored rows trade places (their seq columns kept)
        chain[i], chain[i + 1] = (
            replace(chain[i + 1], seq=chain[i].seq),
            replace(chain[i], seq=chain[i + 1].seq),
        )
    else:  # re-hashed to state another chain: only its link to its chain can betray it
        document = json.loads(chain[i].text)
        document[PARTITION_FIELD] = p + 1
        text = canonical_text(document)
        chain[i] = replace(chain[i], text=text, hash=sha256_hex(text.encode()))
    assert judged(rows, heads) == {p}


@given(sizes, st.data())
def test_a_receipt_moved_into_another_chain_is_named_there(counts, data):
    rows, heads = chains(counts)
    source = data.draw(st.integers(0, len(counts) - 1))
    target = data.draw(st.integers(0, len(counts) - 1).filter(lambda q: q != source))
    moved = rows[source].pop()  # the source's newest, its head rewound to match
    heads[source] = ChainHead(rows[source][-1].seq or 0, rows[source][-1].hash or "")
    rows[target].append(replace(moved, seq=heads[target].seq + 1, partition=target))
    heads[target] = ChainHead(heads[target].seq + 1, moved.hash or "")
    assert judged(rows, heads) == {target}
