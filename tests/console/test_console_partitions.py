"""The console's receipts page over a Postgres store with several receipt chains, as the real
`ctrlrun console` process serves it on loopback: each receipt at its ``P:SEQ``, the chain
verified across every partition, and an edit behind the store's back named in its partition."""

from __future__ import annotations

import pytest

from ctrlrun.conformance.store.backends import with_schema
from support.console import Agents, Client, Console

pytestmark = pytest.mark.postgres


@pytest.fixture
def chained(tmp_path, pg_schema):
    from ctrlrun.postgres import PostgresStateStore

    store = PostgresStateStore(pg_schema.url, schema=pg_schema.schema, partitions=4)
    agents = Agents(tmp_path, store=store)
    for n in range(8):
        agents.refund(f"pay_{n}", 100)
    console = Console(tmp_path, with_schema(pg_schema.url, pg_schema.schema))
    yield agents, console
    console.stop()
    store.close()


def test_receipts_show_their_place_and_a_break_names_its_partition(chained, pg_schema):
    agents, console = chained
    receipts = agents.store.receipts()
    off_zero = next(r for r in receipts if r.partition)
    client = Client(console.url)
    status, page, _ = client.request("GET", "/receipts")
    assert status == 200
    assert "Chain verified: 8 of 8 receipts" in page and "of 4 chains" in page
    assert f'id="seq-{off_zero.partition}:{off_zero.seq}"' in page
    with pg_schema.connect() as conn:
        conn.execute(
            "UPDATE receipts SET document = replace(document, 'pay_', 'pay-')"
            " WHERE partition_id = %s AND seq = %s",
            [off_zero.partition, off_zero.seq],
        )
    status, page, _ = client.request("GET", "/receipts")
    assert status == 200 and "The chain is broken: 1 break(s)." in page
    assert f"content_altered at seq {off_zero.seq} of partition {off_zero.partition}" in page
