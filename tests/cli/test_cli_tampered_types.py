"""A receipt column tampered to hold a BLOB (SQLite lets any column hold one; a Postgres text
column cannot): ``receipts --verify-chain`` names the row ``unreadable`` by seq and carries on
with the rest of the chain, the listing shows it in place; never the CLI's catch-all
("unexpected AttributeError", the fuzzing find)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from ctrlrun.kernel.receipt import BreakKind
from ctrlrun.store.sqlite import SQLiteStateStore
from support.cli import run


@pytest.fixture
def store_url(tmp_path):
    path = tmp_path / "s.db"
    store = SQLiteStateStore(path)
    for index in range(3):
        store.record(
            (), {"receipt_id": f"rcp_{index}", "action_id": f"act_{index}", "result": "committed"}
        )
    store.close()
    return path, f"sqlite:///{path}"


def tamper(path, column):
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE receipts SET {column} = X'ff00' WHERE seq = 2")
    db.close()


@pytest.mark.parametrize("column", ["document", "hash", "receipt_id"])
def test_verify_chain_names_the_unreadable_row(store_url, column):
    path, url = store_url
    tamper(path, column)
    result = run("receipts", "--verify-chain", "--store-url", url)
    assert result.exit_code == 1
    assert "unexpected" not in result.output
    assert result.stderr.strip() == "Error: the receipt chain has 1 break(s)"  # one, not two
    assert "chain: 2 of 3 receipts verified" in result.stdout
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("seq ")]
    assert line.split()[:3] == ["seq", "2", "unreadable"]
    as_json = run("receipts", "--verify-chain", "--json", "--store-url", url)
    report = json.loads(as_json.stdout)
    assert [(b["kind"], b["seq"]) for b in report["breaks"]] == [("unreadable", 2)]


@pytest.mark.parametrize("column", ["document", "hash", "receipt_id"])
def test_the_listing_shows_why_in_place(store_url, column):
    path, url = store_url
    tamper(path, column)
    result = run("receipts", "--store-url", url)
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.stdout.splitlines() if "UNREADABLE" in line]
    assert f"{column} holds a BLOB of 2 bytes, not text" in row
    lines = run("receipts", "--json", "--store-url", url).stdout.splitlines()
    assert json.loads(lines[1])["unreadable"] == f"{column} holds a BLOB of 2 bytes, not text"


def test_the_library_reports_it_too(store_url):
    path, _url = store_url
    tamper(path, "document")
    store = SQLiteStateStore(path, create=False)
    try:
        report = store.verify_chain()
        (receipt,) = [r for r in store.receipts() if r.seq == 2]
    finally:
        store.close()
    assert [(b.kind, b.seq) for b in report.breaks] == [(BreakKind.UNREADABLE, 2)]
    assert receipt.unreadable == "document holds a BLOB of 2 bytes, not text"
    with pytest.raises(ValueError, match="BLOB"):
        receipt["result"]


@pytest.mark.parametrize("value", ["'act_forged'", "X'ff00'"])
def test_verify_chain_checks_the_indexed_columns_as_the_docs_say(store_url, value):
    # the CLI verified the listing's rows, which carry no columns: a forged action_id (what
    # `receipts` filters on) passed; docs/cli.md promises column_mismatch
    path, url = store_url
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE receipts SET action_id = {value} WHERE seq = 3")
    db.close()
    result = run("receipts", "--verify-chain", "--store-url", url)
    assert result.exit_code == 1
    assert [line.split()[:3] for line in result.stdout.splitlines()[1:]] == [
        ["seq", "3", "column_mismatch"]
    ]


@pytest.fixture
def scene_url(empty):
    from support.cli import Scene

    (empty / ".ctrlrun").mkdir()
    scene = Scene(empty)
    scene.committed("pay_1")
    scene.pending("pay_3")
    scene.close()
    return scene.path, scene.url


@pytest.mark.parametrize(
    ("statement", "command", "named"),
    [
        ("UPDATE effects SET attempt = 'first'", ("effects",), "effect 'refund:pay_1'"),
        ("UPDATE effects SET action_id = X'ff00'", ("effects",), "effect 'refund:pay_1'"),
        ("UPDATE approvals SET action_json = X'ff00'", ("approvals",), "approval 'apr_"),
        ("UPDATE approvals SET action_json = '{'", ("approvals",), "approval 'apr_"),
        ("UPDATE effects SET created_at = X'ff00'", ("effects",), "created_at holds a BLOB"),
        ("UPDATE effects SET updated_at = 'noon'", ("effects",), "timestamp column holds 'noon'"),
        ("UPDATE approvals SET action_json = -1", ("approvals",), "action_json holds int"),
        (
            "UPDATE receipt_chain SET seq = X'ff00'",
            ("receipts", "--verify-chain"),
            "the receipt chain head row cannot be read",
        ),
    ],
)
def test_an_unreadable_record_is_one_line_naming_it(scene_url, statement, command, named):
    # fuzzing found each of these failing through the catch-all ("unexpected ValueError")
    path, url = scene_url
    with sqlite3.connect(path) as db:
        db.execute(statement)
    db.close()
    result = run(*command, "--store-url", url)
    assert result.exit_code == 1
    assert "unexpected" not in result.stderr
    assert named in result.stderr and "the store was altered or damaged" in result.stderr
