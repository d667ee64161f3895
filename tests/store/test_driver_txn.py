"""``DriverTxn``: both stores hand a write transaction's own driver connection (and the
Postgres schema) to a caller's SQL, and what is written through it commits or rolls back with
the transaction — the contract a durable database step is built on."""

from __future__ import annotations

import pytest

from ctrlrun.store.ops.evidence import put_receipt_in_txn
from ctrlrun.store.protocol import DriverTxn


class Boom(Exception):
    pass


def table(txn) -> str:
    if txn.schema is None:
        return "app_rows"
    from psycopg import sql

    return sql.Identifier(txn.schema, "app_rows").as_string(txn.connection)


def insert_through_the_connection(txn, value: int) -> None:
    txn.connection.execute(f"INSERT INTO {table(txn)} (v) VALUES ({int(value)})")


def count(txn, what: str) -> int:
    name = table(txn) if what == "app_rows" else table(txn).replace("app_rows", what)
    row = txn.connection.execute(f"SELECT count(*) AS n FROM {name}").fetchone()
    return int(row[0] if txn.schema is None else row["n"])


@pytest.fixture
def app_store(backend, store):
    backend.tamper("CREATE TABLE app_rows (v integer)")
    return store


def receipt(n: int) -> dict:
    return {"receipt_id": f"rcp_app_{n}", "action_id": f"act_{n}", "result": "committed"}


def test_the_transaction_is_a_driver_txn_naming_its_schema(backend, store):
    seen = store.transact(lambda txn: (isinstance(txn, DriverTxn), txn.schema))
    expected = None if backend.name == "sqlite" else backend.pg_schema.schema
    assert seen == (True, expected)
    assert store.schema == expected


def test_what_the_connection_writes_commits_with_the_transaction(app_store):
    def work(txn):
        insert_through_the_connection(txn, 1)
        put_receipt_in_txn(txn, receipt(1))

    app_store.transact(work)
    assert app_store.transact(lambda txn: count(txn, "app_rows")) == 1
    assert [r.receipt_id for r in app_store.receipts()] == ["rcp_app_1"]


def test_and_rolls_back_with_it(app_store):
    def work(txn):
        put_receipt_in_txn(txn, receipt(2))
        insert_through_the_connection(txn, 2)
        raise Boom

    with pytest.raises(Boom):
        app_store.transact(work)
    assert app_store.transact(lambda txn: count(txn, "app_rows")) == 0
    assert app_store.receipts() == ()
    assert app_store.verify_chain().ok


def test_statements_queued_before_are_sent_before_the_callers_own(app_store):
    """Postgres queues the receipt insert to travel with the next statement; handing out the
    connection sends it first, so the caller's SQL sees everything the transaction did."""

    def work(txn):
        put_receipt_in_txn(txn, receipt(3))
        return count(txn, "receipts")

    assert app_store.transact(work) == 1
