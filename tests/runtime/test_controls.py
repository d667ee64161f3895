"""Receipts cite the controls their decision was taken under, on both stores, and the command
line filters by them (``ctrlrun receipts --control ID``)."""

from __future__ import annotations

import json

import pytest

import ctrlrun
from ctrlrun import Control
from ctrlrun.cli.common import sqlite_url
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.event import EventType
from support.cli import run

POLICY = """\
schema: ctrlrun.policy/v1
controls:
  FIN-7:
    title: Refunds above 1,000 EUR need a second person
  OPS-2:
    title: Mail goes out once
actions:
  stripe.refund:
    controls: [FIN-7]
    effect: "refund:{payment_id}"
    rules:
      - when: {amount_lte: 100000}
        decision: allow
      - decision: deny
        controls: [OPS-2]
  email.send:
    effect: "email:{message_id}"
    decision: allow
"""


@pytest.fixture
def calls(store, clock):
    control = Control(load_policy_text(POLICY), store, clock=clock)

    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        return "refunded"

    @ctrlrun.protect("email.send", control=control)
    def send(message_id: str) -> str:
        return "sent"

    with ctrlrun.context("support-bot", "alice"):
        refund("pay_1", 5_000)
        with pytest.raises(ctrlrun.ActionDenied):
            refund("pay_2", 500_000)
        with pytest.raises(ctrlrun.EffectKeyError):
            refund(payment_id="", amount=1)
        send("m1")
    return store


def test_each_receipt_cites_its_decisions_controls_and_the_chain_holds(calls):
    documents = [r.document for r in calls.receipts()]
    cited = [(d["result"], d.get("controls")) for d in documents]
    assert cited == [
        ("committed", ["FIN-7"]),
        ("denied", ["FIN-7", "OPS-2"]),  # the entry's and the deciding rule's
        ("denied", ["FIN-7"]),  # refused for its effect key, still on this action
        ("committed", None),  # cites nothing: the key is absent, not empty
    ]
    assert calls.verify_chain().ok
    evaluated = [e.data for e in calls.events() if e.type is EventType.POLICY_EVALUATED]
    assert [d.get("controls") for d in evaluated] == [["FIN-7"], ["FIN-7", "OPS-2"], None]


def test_receipts_control_lists_only_the_receipts_citing_it(request, calls, backend, monkeypatch):
    if backend == "sqlite":
        url = sqlite_url(calls.path)
    else:
        from ctrlrun.conformance.store.backends import with_schema

        url = with_schema(request.getfixturevalue("pg_schema").url, calls.schema)
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    listed = run("receipts", "--control", "OPS-2", "--json", "--store-url", url)
    assert listed.exit_code == 0, listed.output
    [only] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert only["controls"] == ["FIN-7", "OPS-2"] and only["result"] == "denied"
    fin = run("receipts", "--control", "FIN-7", "--store-url", url)
    assert fin.exit_code == 0 and len(fin.stdout.splitlines()) == 1 + 3  # header + 3 rows
    none = run("receipts", "--control", "NOPE-1", "--store-url", url)
    assert (none.exit_code, none.stdout) == (0, "no receipts cite NOPE-1\n")
    assert run("receipts", "--control", "NOPE-1", "--json", "--store-url", url).stdout == ""
    both = run("receipts", "--control", "FIN-7", "--verify-chain", "--store-url", url)
    assert both.exit_code == 2 and "--control filters the listing" in both.stderr
