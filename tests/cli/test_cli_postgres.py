"""The operator's read commands on a Postgres store: ``--store-url
'postgresql://…?ctrlrun_schema=…'`` reads what real protected calls wrote, writes nothing, and
a missing, empty, behind or ahead schema is refused in one line with nothing created or migrated."""

from __future__ import annotations

import json

import pytest

from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store.queries import migration_files
from support.cli import Scene, refused, run
from support.pg import unique_name
from support.pg_sql import execute, objects_in, schemas_like

pytestmark = pytest.mark.postgres

KNOWN = [m for m, _ in migration_files("postgres")]


def applied(pg_schema) -> list[str]:
    rows = execute(
        pg_schema.url,
        pg_schema.schema,
        "SELECT migration_id FROM {schema}.schema_version ORDER BY migration_id",
    )
    return [r["migration_id"] for r in rows]


def counts(pg_schema) -> dict[str, int]:
    return {
        table: execute(
            pg_schema.url, pg_schema.schema, f"SELECT count(*) AS n FROM {{schema}}.{table}"
        )[0]["n"]
        for table in ("effects", "receipts", "events", "approvals")
    }


@pytest.fixture
def history(empty, pg_schema):
    """committed pay_1, a blocked duplicate, ambiguous pay_2, pay_3 waiting for a person —
    written by real protected calls on the Postgres store."""
    url = with_schema(pg_schema.url, pg_schema.schema)
    scene = Scene(
        empty,
        opener=lambda clock: PostgresStateStore(
            pg_schema.url, schema=pg_schema.schema, clock=clock
        ),
        url=url,
    )
    scene.committed("pay_1")
    scene.refund("pay_1", 5_000)
    scene.ambiguous("pay_2")
    scene.pending("pay_3")
    yield scene
    scene.close()


def test_the_read_commands_read_what_protected_calls_wrote_and_write_nothing(history, pg_schema):
    before = counts(pg_schema)
    effects = run("effects", "--store-url", history.url, "--json")
    assert effects.exit_code == 0, effects.output
    states = {d["effect_key"]: d["state"] for d in map(json.loads, effects.stdout.splitlines())}
    assert states == {"refund:pay_1": "committed", "refund:pay_2": "ambiguous"}
    receipts = run("receipts", "--store-url", history.url, "--verify-chain")
    assert receipts.exit_code == 0, receipts.output
    assert receipts.stdout.splitlines()[-1] == (  # pay_1's two receipts share one chain
        "chain: 3 of 3 receipts verified; 64 chains, the longest at seq 2"
    )
    committed = history.store.receipts()[0]["action_id"]
    inspected = run("inspect", committed, "--store-url", history.url)
    assert inspected.exit_code == 0, inspected.output
    assert "refund:pay_1  committed  attempt 1" in inspected.stdout
    assert "EXECUTION_COMMITTED" in inspected.stdout
    approvals = run("approvals", "--pending", "--store-url", history.url)
    assert approvals.exit_code == 0 and "stripe.refund" in approvals.stdout
    assert counts(pg_schema) == before  # reading evidence appended nothing
    assert applied(pg_schema) == KNOWN


def test_a_missing_schema_is_refused_and_not_created(empty, pg_server):
    name = unique_name("nope_")
    url = with_schema(pg_server.url, name)
    for args in (("effects",), ("receipts",), ("inspect", "act_x")):
        refused(run(*args, "--store-url", url), f"schema {name!r} does not exist")
    assert schemas_like(pg_server, name) == []


def test_an_empty_schema_is_refused_and_left_empty(empty, pg_schema, pg_server):
    url = with_schema(pg_schema.url, pg_schema.schema)
    refused(run("receipts", "--store-url", url), "holds no ctrlrun schema")
    assert objects_in(pg_server, pg_schema.schema) == []


def test_a_behind_schema_is_refused_without_migrating_it(empty, pg_schema, monkeypatch):
    PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
    newer = (*migration_files("postgres"), ("9000_next", "CREATE TABLE {schema}.later (a int);"))
    monkeypatch.setattr("ctrlrun.store.postgres.sqltext.migration_files", lambda _d: newer)
    url = with_schema(pg_schema.url, pg_schema.schema)
    refused(run("effects", "--store-url", url), "behind", "does not migrate")
    assert applied(pg_schema) == KNOWN
    assert ("relation r", "later") not in objects_in(pg_schema.server, pg_schema.schema)


def test_an_ahead_schema_is_refused_and_left_as_it_is(empty, pg_schema):
    PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
    execute(
        pg_schema.url,
        pg_schema.schema,
        "INSERT INTO {schema}.schema_version VALUES ('9999_future', now(), '9.9.9')",
    )
    url = with_schema(pg_schema.url, pg_schema.schema)
    for args in (("effects",), ("receipts",), ("approvals",)):
        refused(run(*args, "--store-url", url), "9999_future", "upgrade ctrlrun")
    assert applied(pg_schema) == [*KNOWN, "9999_future"]  # nothing rolled back or rewritten
