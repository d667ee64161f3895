"""``ctrlrun receipts --check FILE|-`` and ``ctrlrun.check_held_receipts``: receipts a caller
holds, checked against a store that lost its tail and wrote new receipts over the lost seqs —
what an asynchronous failover leaves, and what ``--verify-chain`` cannot see (it stays ok)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import ctrlrun
from ctrlrun import Control, HeldStatus, JSONLSink, SQLiteStateStore, check_held_receipts
from ctrlrun.canonical import canonical_text, sha256_hex
from ctrlrun.cli import main
from ctrlrun.config import load_policy_text
from ctrlrun.postgres import PostgresStateStore
from support.cli import run
from support.policies import POLICY


def calls(store: Any, sink: Path, ids: range) -> None:
    control = Control(load_policy_text(POLICY), store, sinks=[JSONLSink(sink)])

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        return "ok"

    with ctrlrun.context("bot"):
        for n in ids:
            refund(f"pay_{n}", 5)


def held(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def failed_over(tmp_path: Path) -> tuple[Path, Path]:
    """A SQLite store that lost its last three receipts (restored from a copy taken after the
    first three calls) and then took two other calls: held.jsonl holds all six receipts the
    caller was handed before the loss."""
    db, snapshot, sink = tmp_path / "s.db", tmp_path / "copy.db", tmp_path / "held.jsonl"
    store = SQLiteStateStore(str(db))
    calls(store, sink, range(3))
    store.close()
    shutil.copy(db, snapshot)
    store = SQLiteStateStore(str(db))
    calls(store, sink, range(3, 6))
    store.close()
    shutil.copy(snapshot, db)  # the "new primary": the tail is gone
    store = SQLiteStateStore(str(db))
    calls(store, tmp_path / "other.jsonl", range(100, 102))
    assert store.verify_chain().ok  # the chain alone says nothing is wrong
    store.close()
    return db, sink


def test_the_library_names_present_replaced_and_missing(failed_over):
    db, sink = failed_over
    store = SQLiteStateStore(str(db))
    checks = check_held_receipts(store, held(sink))
    assert [c.status for c in checks] == [HeldStatus.PRESENT] * 3 + [
        HeldStatus.REPLACED,
        HeldStatus.REPLACED,
        HeldStatus.MISSING,
    ]
    assert checks[3].found and checks[3].found != checks[3].receipt_id
    store.close()


def test_the_cli_exits_1_and_lists_each_verdict(failed_over):
    db, sink = failed_over
    result = run("receipts", "--check", str(sink), "--store-url", f"sqlite:///{db}")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: 3 of 6 held receipts are not in the store as held (1 missing, 2 replaced)"
    )
    statuses = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert statuses == ["present"] * 3 + ["replaced", "replaced", "missing"]


def test_the_cli_reads_stdin_and_answers_json(failed_over):
    db, sink = failed_over
    args = ["receipts", "--check", "-", "--json", "--store-url", f"sqlite:///{db}"]
    result = CliRunner().invoke(main, args, input=sink.read_text())
    assert result.exit_code == 1
    verdicts = [json.loads(line)["status"] for line in result.stdout.splitlines()]
    assert verdicts == ["present"] * 3 + ["replaced", "replaced", "missing"]


def test_every_held_receipt_present_exits_0(tmp_path):
    db, sink = tmp_path / "s.db", tmp_path / "held.jsonl"
    calls(SQLiteStateStore(str(db)), sink, range(2))
    result = run("receipts", "--check", str(sink), "--store-url", f"sqlite:///{db}")
    assert result.exit_code == 0, result.output
    assert "all 2 held receipts are present and identical" in result.stdout


def test_an_altered_or_unreadable_copy_proves_nothing(tmp_path):
    db, sink = tmp_path / "s.db", tmp_path / "held.jsonl"
    calls(SQLiteStateStore(str(db)), sink, range(1))
    copy = held(sink)[0]
    copy["result"] = "failed"  # altered by whoever held it
    sink.write_text(json.dumps(copy) + "\nnot json\n")
    result = run("receipts", "--check", str(sink), "--json", "--store-url", f"sqlite:///{db}")
    assert result.exit_code == 1
    verdicts = [json.loads(line) for line in result.stdout.splitlines()]
    assert [v["status"] for v in verdicts] == ["not_a_receipt", "not_a_receipt"]
    assert "hash does not match" in verdicts[0]["detail"]
    assert verdicts[1]["detail"] == "line 2: not JSON"


@pytest.mark.postgres
def test_held_receipts_on_postgres(pg_schema, tmp_path):
    sink = tmp_path / "held.jsonl"
    store = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    calls(store, sink, range(2))
    copies = held(sink)
    document = {k: v for k, v in copies[-1].items() if k != "hash"}
    document.update(receipt_id="rcpt_lost", seq=document["seq"] + 5)  # a lost tail's copy
    lost = {**document, "hash": sha256_hex(canonical_text(document).encode("utf-8"))}
    checks = check_held_receipts(store, [*copies, lost])
    assert [c.status for c in checks] == [HeldStatus.PRESENT] * 2 + [HeldStatus.MISSING]
    store.close()
