"""The CLI over partitioned receipt chains: ``ctrlrun init --partitions N`` on Postgres (and a
one-line refusal on SQLite, nothing written), the listing's ``P:SEQ``, and ``receipts
--verify-chain`` naming a break with its partition, on real stores written by real calls."""

from __future__ import annotations

import json

import pytest

from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.postgres import PostgresStateStore
from support.cli import Scene, refused, run


def test_init_refuses_several_chains_on_sqlite_and_writes_nothing(empty):
    line = refused(run("init", "--partitions", "4"), "SQLite store keeps one receipt chain")
    assert "nothing written" in line
    assert list(empty.iterdir()) == []


def test_init_refuses_a_count_out_of_range_as_a_usage_error(empty):
    result = run("init", "--partitions", "0")
    assert result.exit_code == 2 and "--partitions" in result.stderr
    assert list(empty.iterdir()) == []


@pytest.mark.postgres
def test_init_creates_a_postgres_store_with_the_chains_asked_for(empty, pg_schema):
    url = with_schema(pg_schema.url, pg_schema.schema)
    result = run("init", "--store-url", url, "--partitions", "8")
    assert result.exit_code == 0, result.output
    assert "(8 receipt chains)" in result.stdout
    store = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    assert store.partitions == 8
    store.close()
    again = run("init", "--store-url", url, "--partitions", "16")
    refused(again, "keeps 8 receipt partition(s), not 16")


@pytest.mark.postgres
def test_the_listing_and_the_verifier_name_each_receipts_chain(empty, pg_schema):
    url = with_schema(pg_schema.url, pg_schema.schema)
    PostgresStateStore(pg_schema.url, schema=pg_schema.schema, partitions=4).close()
    scene = Scene(
        empty,
        opener=lambda clock: PostgresStateStore(
            pg_schema.url, schema=pg_schema.schema, clock=clock
        ),
        url=url,
    )
    try:
        for n in range(8):
            scene.committed(f"pay_{n}")
        receipts = scene.store.receipts()
        off_zero = next(r for r in receipts if r.partition)
        listing = run("receipts", "--store-url", url)
        assert listing.exit_code == 0
        assert f"{off_zero.partition}:{off_zero.seq}" in listing.stdout
        ok = run("receipts", "--verify-chain", "--json", "--store-url", url)
        verdict = json.loads(ok.stdout)
        assert verdict["ok"] and verdict["partitions"] == 4 and len(verdict["heads"]) == 4
        with pg_schema.connect() as conn:
            conn.execute(
                "UPDATE receipts SET document = replace(document, 'pay_', 'pay-')"
                " WHERE partition_id = %s AND seq = %s",
                [off_zero.partition, off_zero.seq],
            )
        broken = run("receipts", "--verify-chain", "--store-url", url)
        assert broken.exit_code == 1
        assert f"seq {off_zero.seq} of partition {off_zero.partition}" in broken.stdout
        assert off_zero.receipt_id in broken.stdout
    finally:
        scene.close()
