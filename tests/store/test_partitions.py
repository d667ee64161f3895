"""Partitioned receipt chains (issue 28, decision 0029), on a real Postgres and a real SQLite
file: the count is fixed at creation, each receipt lands in the chain its effect key picks and
states it, every chain verifies on its own, and every break, cut tail, checkpoint and prune is
named per partition. Eight real processes behind a barrier write into their chains at once.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import ctrlrun
from ctrlrun.checkpoints import make_checkpoint, prune
from ctrlrun.config import load_policy_text
from ctrlrun.errors import InvalidArgument, PartitionRefusal, PartitionsMismatch
from ctrlrun.kernel import signing
from ctrlrun.kernel.partition import receipt_partition
from ctrlrun.kernel.receipt import BreakKind, describe
from ctrlrun.store import open_store
from ctrlrun.store.stats import gather_stats
from support.policies import POLICY
from support.race import preloaded_processes, run_racers

pytestmark = pytest.mark.postgres

CHAINS = 4


def _open(pg_schema: Any, **kwargs: Any) -> Any:
    from ctrlrun.postgres import PostgresStateStore

    return PostgresStateStore(pg_schema.url, schema=pg_schema.schema, **kwargs)


def _url(pg_schema: Any, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"ctrlrun_schema": pg_schema.schema, **params}.items())
    return f"{pg_schema.url}{'&' if '?' in pg_schema.url else '?'}{query}"


def _refunds(store: Any, count: int, prefix: str = "p") -> list[Any]:
    control = ctrlrun.Control(load_policy_text(POLICY), store)
    receipts = []
    for n in range(count):
        action = ctrlrun.Action(
            "stripe.refund", {"payment_id": f"{prefix}{n}", "amount": 1}, ctrlrun.Principal("b")
        )
        receipts.append(control.execute(action, lambda **_: "ok"))
    return receipts


def _in(receipts: list[Any], partition: int) -> list[Any]:
    return [r for r in receipts if r.partition == partition]


def _busy(receipts: list[Any]) -> int:
    """A partition other than 0 holding at least two receipts."""
    counts: dict[int, int] = {}
    for receipt in receipts:
        counts[receipt.partition] = counts.get(receipt.partition, 0) + 1
    return max((p for p, n in counts.items() if p and n >= 2), key=lambda p: counts[p])


# --- the count ---------------------------------------------------------------------------


def test_a_new_postgres_store_keeps_64_chains_by_default(pg_schema):
    store = _open(pg_schema)
    try:
        assert store.partitions == 64 and len(store.chain_heads()) == 64
        assert set(store.chain_heads()) == {(0, "sha256:" + "0" * 64)}
    finally:
        store.close()


def test_the_count_is_fixed_when_the_store_is_created(pg_schema):
    _open(pg_schema, partitions=CHAINS).close()
    again = _open(pg_schema)  # no count given: the store's own
    assert again.partitions == CHAINS
    again.close()
    with pytest.raises(PartitionsMismatch) as caught:
        _open(pg_schema, partitions=8)
    assert caught.value.reason is PartitionRefusal.COUNT_DIFFERS
    assert (caught.value.stored, caught.value.given) == (CHAINS, 8)
    store = open_store(_url(pg_schema, ctrlrun_partitions=str(CHAINS)))
    assert store.partitions == CHAINS
    store.close()


def test_a_reading_open_given_another_count_is_refused_and_the_url_and_argument_must_agree(
    pg_schema,
):
    _open(pg_schema, partitions=CHAINS).close()
    with pytest.raises(PartitionsMismatch) as caught:
        open_store(_url(pg_schema), existing=True, partitions=8)
    assert caught.value.reason is PartitionRefusal.COUNT_DIFFERS
    reader = open_store(_url(pg_schema), read_only=True, partitions=CHAINS)
    assert reader.partitions == CHAINS
    reader.close()
    with pytest.raises(InvalidArgument, match="different counts"):
        open_store(_url(pg_schema, ctrlrun_partitions="4"), partitions=8)


@pytest.mark.parametrize("count", ["0", "4097", "x", "-1"])
def test_a_bad_count_in_the_url_is_refused(pg_schema, count):
    with pytest.raises(InvalidArgument, match="ctrlrun_partitions"):
        open_store(_url(pg_schema, ctrlrun_partitions=count))


@pytest.mark.parametrize("count", [0, 4097])
def test_a_bad_count_given_is_refused_before_anything_is_created(pg_schema, count):
    with pytest.raises(InvalidArgument):
        _open(pg_schema, partitions=count)
    with psycopg.connect(pg_schema.url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", [pg_schema.schema]
        ).fetchone()
    assert tables == (0,)


@pytest.mark.parametrize("existing", [False, True])
def test_sqlite_keeps_one_chain_and_refuses_more_before_touching_the_file(tmp_path, existing):
    path = tmp_path / "state.db"
    if existing:
        open_store(f"sqlite:///{path}").close()
    with pytest.raises(PartitionsMismatch) as caught:
        open_store(f"sqlite:///{path}", partitions=2)
    assert caught.value.reason is PartitionRefusal.NOT_SUPPORTED
    assert path.exists() is existing
    store = open_store(f"sqlite:///{path}", partitions=1)
    assert store.partitions == 1 and len(store.chain_heads()) == 1
    store.close()


# --- where receipts go --------------------------------------------------------------------


def test_each_receipt_lands_in_the_chain_its_effect_key_picks(pg_schema):
    store = _open(pg_schema, partitions=CHAINS)
    try:
        receipts = _refunds(store, 24)
        for receipt in receipts:
            picked = receipt_partition(receipt["effect_key"], receipt["action_id"], CHAINS)
            assert receipt.partition == picked
            assert receipt.document.get("partition", 0) == picked  # stated, and hashed
        heads = store.chain_heads()
        for p in range(CHAINS):
            chain = _in(list(store.receipts()), p)
            assert [r.seq for r in chain] == list(range(1, len(chain) + 1))
            assert heads[p].seq == len(chain)
        assert len({r.partition for r in receipts}) == CHAINS
        report = store.verify_chain()
        assert report.ok and report.verified == 24 and report.partitions == CHAINS
    finally:
        store.close()


def test_every_retry_of_one_effect_reads_in_one_chain(pg_schema):
    store = _open(pg_schema, partitions=CHAINS)
    try:
        _refunds(store, 1)
        with pytest.raises(ctrlrun.DuplicateEffect):
            _refunds(store, 1)  # the same key again: refused, and its receipt beside the first
        first, retry = store.receipts()
        assert first.partition == retry.partition and retry.seq == first.seq + 1
    finally:
        store.close()


# --- one verifier, every chain ------------------------------------------------------------


def test_an_edit_in_a_chain_is_named_with_its_partition(pg_schema):
    store = _open(pg_schema, partitions=CHAINS)
    try:
        receipts = _refunds(store, 16)
        p = _busy(receipts)
        victim = _in(receipts, p)[0]
        with pg_schema.connect() as conn:
            conn.execute(
                "UPDATE receipts SET document = replace(document, '\"amount\":1', '\"amount\":9')"
                " WHERE partition_id = %s AND seq = %s",
                [p, victim.seq],
            )
        report = store.verify_chain()
        assert [(b.kind, b.partition, b.seq) for b in report.breaks] == [
            (BreakKind.CONTENT_ALTERED, p, victim.seq)
        ]
        assert f"of partition {p}" in describe(report.breaks[0])
    finally:
        store.close()


def test_a_receipt_moved_into_another_chain_is_named_there(pg_schema):
    store = _open(pg_schema, partitions=CHAINS)
    try:
        receipts = _refunds(store, 16)
        p = _busy(receipts)
        last = _in(receipts, p)[-1]
        other = next(q for q in range(CHAINS) if q != p)
        head = store.chain_heads()[other]
        with pg_schema.connect() as conn:  # moved, renumbered and the heads rewound to match
            conn.execute(
                "UPDATE receipts SET partition_id = %s, seq = %s WHERE partition_id = %s"
                " AND seq = %s",
                [other, head.seq + 1, p, last.seq],
            )
            conn.execute("UPDATE receipt_chain SET seq = seq - 1 WHERE partition_id = %s", [p])
        kinds = {(b.kind, b.partition) for b in store.verify_chain().breaks}
        assert (BreakKind.LINK_BROKEN, other) in kinds
    finally:
        store.close()


def test_a_cut_tail_with_its_head_rewound_is_named_against_a_checkpoint(pg_schema, tmp_path):
    store = _open(pg_schema, partitions=CHAINS)
    key, public = signing.generate()
    file = tmp_path / "checkpoints"
    try:
        receipts = _refunds(store, 16)
        made = make_checkpoint(store, key, file=file)
        assert [h.partition for h in made.heads] == list(range(CHAINS))
        assert sum(h.seq for h in made.heads) == 16
        p = _busy(receipts)
        chain = _in(receipts, p)
        with pg_schema.connect() as conn:  # delete the newest and rewind the head: no gap
            conn.execute(
                "DELETE FROM receipts WHERE partition_id = %s AND seq = %s", [p, chain[-1].seq]
            )
            conn.execute(
                "UPDATE receipt_chain SET seq = %s, hash = %s WHERE partition_id = %s",
                [chain[-2].seq, chain[-2].hash, p],
            )
        assert store.verify_chain().ok  # unanchored, a cut chain proves its own end
        from ctrlrun.checkpoints import load_checkpoints, verify_store

        proven = load_checkpoints(file, public)
        found = {(b.kind, b.partition, b.seq) for b in verify_store(store, proven).breaks}
        assert (BreakKind.TAIL_CUT, p, chain[-1].seq) in found
        assert (BreakKind.HEAD_REWOUND, p, chain[-2].seq) in found
    finally:
        store.close()


def test_prune_cuts_every_chain_at_the_checkpoint_and_the_rest_verifies(pg_schema, tmp_path):
    from ctrlrun.checkpoints import load_checkpoints

    store = _open(pg_schema, partitions=CHAINS)
    key, public = signing.generate()
    file = tmp_path / "checkpoints"
    try:
        _refunds(store, 12, "old")
        made = make_checkpoint(store, key, file=file)
        _refunds(store, 8, "new")
        before = gather_stats(store, None).counts
        proven = load_checkpoints(file, public)
        pruned = prune(store, made.time + timedelta(seconds=1), proven)
        assert pruned.receipts == 12
        left = store.receipts()
        assert len(left) == 8 and all(r["arguments"]["payment_id"].startswith("new") for r in left)
        anchors = store.chain_anchors()
        assert {p: (a.seq, a.hash) for p, a in anchors.items()} == {
            h.partition: (h.seq, h.hash) for h in made.heads if h.seq
        }
        report = store.verify_chain(checkpoints={h.partition: [h.head] for h in made.heads})
        assert report.ok and report.verified == 8
        assert gather_stats(store, None).counts == before  # pruned receipts stay counted
    finally:
        store.close()


# --- an old store migrates forward with its history --------------------------------------


def test_a_store_from_before_partitions_gets_its_chains_and_keeps_its_history_in_partition_0(
    pg_schema, monkeypatch
):
    import ctrlrun.store.postgres.atopen as atopen

    every = atopen.migrations_for
    monkeypatch.setattr(
        atopen, "migrations_for", lambda schema, n=1: every(schema, n)[:6]
    )  # the schema as 0006 left it: one chain, its head row keyed id = 1
    monkeypatch.setattr(atopen, "stored_partitions", lambda *_: 1)  # nothing to count yet
    _open(pg_schema).close()
    template = (
        '{"action_id":"act_%s","prev_hash":"P","receipt_id":"rcp_%s","result":"denied","seq":S}'
    )
    with pg_schema.connect() as conn:
        for n in range(3):
            conn.execute(
                "SELECT * FROM ctrlrun_record_receipt(NULL, '[]', %s, %s, NULL, 'denied', %s,"
                " 'S', 'P')",
                [f"rcp_{n}", f"act_{n}", template % (n, n)],
            )
    monkeypatch.undo()
    store = _open(pg_schema)  # migrates 0007 forward: 64 chains, the old one partition 0's
    try:
        assert store.partitions == 64
        assert [(r.partition, r.seq) for r in store.receipts()] == [(0, 1), (0, 2), (0, 3)]
        assert store.chain_heads()[0] == (3, store.receipts()[-1].hash)
        assert store.verify_chain().ok
        receipts = _refunds(store, 40)
        assert len({r.partition for r in receipts}) > 10
        zero = [r for r in store.receipts() if r.partition == 0]
        assert [r.seq for r in zero] == list(range(1, len(zero) + 1))  # 0 goes on from 3
        report = store.verify_chain()
        assert report.ok and report.verified == 43
    finally:
        store.close()


# --- eight processes at once ------------------------------------------------------------


def _writer(url: str, policy: str, barrier: Any, results: Any) -> None:
    """One process: 20 refunds on keys of its own, started together behind the barrier."""
    from ctrlrun.store import open_store as opened

    control = ctrlrun.Control(load_policy_text(policy), opened(url))
    barrier.wait(timeout=60)
    try:
        for n in range(20):
            args = {"payment_id": f"w{os.getpid()}-{n}", "amount": 1}
            control.execute(
                ctrlrun.Action("stripe.refund", args, ctrlrun.Principal("b")), lambda **_: "ok"
            )
        results.put((os.getpid(), "done"))
    except BaseException as exc:  # a finding, reported to the parent
        results.put((os.getpid(), f"error:{type(exc).__name__}:{exc}"))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_eight_processes_write_into_their_chains_at_once(pg_schema, tmp_path: Path):
    _open(pg_schema, partitions=8).close()
    outcomes = run_racers(preloaded_processes(), _writer, (_url(pg_schema), POLICY), 8)
    assert {answer for _, answer in outcomes} == {"done"}
    store = _open(pg_schema)
    try:
        receipts = list(store.receipts())
        assert len(receipts) == 160 and len({r.partition for r in receipts}) == 8
        for p in range(8):
            assert [r.seq for r in sorted(_in(receipts, p), key=lambda r: r.seq)] == list(
                range(1, len(_in(receipts, p)) + 1)
            )
        report = store.verify_chain()
        assert report.ok and report.verified == 160
    finally:
        store.close()
