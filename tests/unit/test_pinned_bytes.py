"""Pinned bytes: the exact canonical texts, hashes, events and rows the hot path writes.

Performance work on the protected call composes canonical texts from precomputed parts,
reuses statements and skips re-encoding. None of that may change a single byte a verifier or
an old store relies on, so these tests pin, for fixed inputs, every row a set of protected
calls leaves in a SQLite store (effects, approvals, events, receipts and the chain head), and
the kernel's canonical forms directly. The expected values were produced by the code before
any optimization (main at 27d7abe) and must never be regenerated to make a change pass: a
difference here is a changed hash, i.e. a broken promise to every stored receipt.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import ctrlrun
from ctrlrun import canonical
from ctrlrun._time import ManualClock
from ctrlrun.canonical import canonical_text, digest
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.evidence_text import event_data_json
from ctrlrun.kernel.receipt import ChainHead, chain_receipt

PINNED = Path(__file__).with_name("pinned_hot_path.json")

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  pin.refund:
    decision: allow
    effect: "refund:{payment_id}"
    resource: "payment:{payment_id}"
  pin.read:
    decision: allow
  pin.approved:
    decision: approve
    effect: "approved:{n}"
  pin.denied:
    decision: deny
"""

ARGS = {"payment_id": "pay_1", "amount": 1250, "note": "café ✓ \u2028", "tags": ["a", {"b": None}]}


class TestKernelForms:
    def test_an_action_s_canonical_bytes_and_hash(self):
        action = Action(
            "pin.refund",
            ARGS,
            Principal("agent-1", "ülrike"),
            resource="payment:pay_1",
            action_id="act_fixed",
        )
        assert (
            action.canonical
            == (
                '{"arguments":{"amount":1250,"note":"café ✓ \u2028","payment_id":"pay_1",'
                '"tags":["a",{"b":null}]},"environment":"production","name":"pin.refund",'
                '"principal":{"agent":"agent-1","user":"ülrike"},"resource":"payment:pay_1",'
                '"schema":"ctrlrun.action/v1"}'
            ).encode()
        )
        assert action.action_hash == (
            "sha256:fbaadf2b2312ee984ee395e26712f55bd27f7e2547982ab6579c3da6fbd30002"
        )

    def test_an_action_without_user_or_resource(self):
        action = Action("pin.read", {}, Principal("a"), environment="staging")
        assert action.canonical == (
            b'{"arguments":{},"environment":"staging","name":"pin.read",'
            b'"principal":{"agent":"a","user":null},"resource":null,"schema":"ctrlrun.action/v1"}'
        )
        assert action.action_hash == digest(json.loads(action.canonical))

    def test_a_chained_receipt_s_text_and_hash(self):
        draft = {"schema": "ctrlrun.receipt/v1", "receipt_id": "rcp_1", "z": "ü", "a": [1, None]}
        seq, text, hashed = chain_receipt(draft, ChainHead(41, "sha256:" + "ab" * 32))
        assert seq == 42
        assert text == (
            '{"a":[1,null],"prev_hash":"sha256:' + "ab" * 32 + '","receipt_id":"rcp_1",'
            '"schema":"ctrlrun.receipt/v1","seq":42,"z":"ü"}'
        )
        assert hashed == canonical.sha256_hex(text.encode())

    def test_event_data_is_ascii_escaped_sorted_json(self):
        assert event_data_json({"b": "é", "a": {"y": 1, "x": None}}) == (
            '{"a":{"x":null,"y":1},"b":"\\u00e9"}'
        )
        assert canonical_text({"b": "é"}) == '{"b":"é"}'


def _rows(path: Path) -> dict[str, list[list[object]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            table: [list(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1")]
            for table in (
                "effects",
                "approvals",
                "approval_grants",
                "effect_templates",
                "events",
                "receipts",
                "receipt_chain",
            )
        }
    finally:
        conn.close()


def run_scenarios(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Every kind of protected call once, with fixed ids and a fixed clock; the rows left."""
    counter = iter(range(1, 10_000))
    monkeypatch.setattr(canonical, "random_hex32", lambda: f"{next(counter):032x}")
    clock = ManualClock(datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC))
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db", clock=clock)
    control = ctrlrun.Control(load_policy_text(POLICY), store, clock=clock)

    @ctrlrun.protect("pin.refund", control=control)
    def refund(payment_id: str, amount: int, note: str, tags: list[object]) -> dict[str, object]:
        if amount == 1:
            raise ctrlrun.NotExecuted("declined")
        if amount == 2:
            raise RuntimeError("lost ✗")
        return {"ok": True, "id": payment_id}

    @ctrlrun.protect("pin.read", control=control)
    def read(q: str = "x") -> str:
        return q

    # "{n}" takes text alone now (decision 0026); the function's own ":int" template, which
    # replaces the policy's, renders and remembers exactly the bytes "{n}" did for an integer
    @ctrlrun.protect("pin.approved", control=control, effect="approved:{n:int}")
    def approved(n: int) -> int:
        return n

    @ctrlrun.protect("pin.denied", control=control)
    def denied(n: int) -> int:
        return n

    with ctrlrun.context(agent="agent-1", user="ülrike"):
        refund(**ARGS)
        clock.advance(timedelta(microseconds=1))
        with pytest.raises(ctrlrun.DuplicateEffect):
            refund(**ARGS)
        read()
        with pytest.raises(ctrlrun.NotExecuted):
            refund(payment_id="pay_2", amount=1, note="", tags=[])
        refund(payment_id="pay_2", amount=3, note="", tags=[])
        with pytest.raises(RuntimeError):
            refund(payment_id="pay_3", amount=2, note="", tags=[])
        with pytest.raises(ctrlrun.ApprovalRequired) as asked:
            approved(7)
        store.grant_approval(asked.value.request_id, "bob")
        with ctrlrun.with_approval(asked.value.request_id):
            approved(7)
        with pytest.raises(ctrlrun.ActionDenied):
            denied(1)
    store.close()
    return _rows(tmp_path / "state.db")


def test_every_row_a_protected_call_writes_is_pinned(tmp_path, monkeypatch):
    rows = json.loads(json.dumps(run_scenarios(tmp_path, monkeypatch)))
    assert rows == json.loads(PINNED.read_text(encoding="utf-8"))


def test_the_pinned_chain_verifies(tmp_path, monkeypatch):
    run_scenarios(tmp_path, monkeypatch)
    report = ctrlrun.SQLiteStateStore(tmp_path / "state.db").verify_chain()
    assert report.ok and report.verified == 8
