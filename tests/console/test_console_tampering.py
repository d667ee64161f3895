"""The console shows a request whose stored action was rewritten in the database as
tampering, never as a request, and refuses to grant or deny it (nothing written but the
tampering event); under a policy that names approvers it answers only what it can sign, a
denial too. Its HTML, over the real `ctrlrun console` process on loopback."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from ctrlrun import ApprovalRequired
from ctrlrun.kernel.event import EventType
from ctrlrun.kernel.signing import answer_message, generate, verify
from support.console import CONSOLE_POLICY, Agents, Client, Console


@pytest.fixture
def agents(tmp_path):
    built = Agents(tmp_path)
    yield built
    built.store.close()


def test_a_tampered_request_is_shown_as_tampering_and_cannot_be_answered(agents, tmp_path):
    honest = agents.refund("pay_ok", 500_000)
    waiting = agents.refund("pay_1", 900_000)
    assert isinstance(waiting, ApprovalRequired) and isinstance(honest, ApprovalRequired)
    approval_id = waiting.request_id
    with sqlite3.connect(agents.path) as conn:  # the attacker: 9 shown, 900000 bound
        conn.execute(
            "UPDATE approvals SET action_json = replace(action_json, '\"amount\": 900000',"
            " '\"amount\": 9') WHERE approval_id = ?",
            (approval_id,),
        )
    conn.close()
    console = Console(tmp_path, agents.path)
    try:
        client = Client(console.url)
        status, html, _ = client.request("GET", "/")
        assert status == 200
        assert f'id="tampered-{approval_id}"' in html and "do not approve" in html
        assert f'id="request-{approval_id}"' not in html  # never shown as a request
        assert f"/approvals/{approval_id}/grant" not in html
        assert f'id="request-{honest.request_id}"' in html  # the intact one still is
        _, ids, _ = client.request("GET", "/inbox/pending.json")
        assert approval_id not in json.loads(ids)["pending"]
        csrf = re.search(r'name="csrf" value="([^"]+)"', html)
        assert csrf is not None
        token = csrf.group(1)
        form = {"csrf": token, "action_hash": waiting.action_hash or ""}
        status, refusal, _ = client.request("POST", f"/approvals/{approval_id}/grant", form)
        assert status == 409 and "was tampered with" in refusal
        form = {"csrf": token, "reason": "looks wrong"}
        status, refusal, _ = client.request("POST", f"/approvals/{approval_id}/deny", form)
        assert status == 409 and "was tampered with" in refusal
    finally:
        console.stop()
    record = agents.store.get_approval(approval_id)
    assert record is not None and str(record.status) == "pending"
    events = [
        e
        for e in agents.store.events()
        if e.approval_id == approval_id and e.type is EventType.APPROVAL_INVALIDATED
    ]
    assert [e.data["reason"] for e in events] == ["tampered"] * 3  # listed once, two answers


def test_under_named_approvers_the_console_answers_only_when_it_can_sign(
    agents, tmp_path, monkeypatch
):
    pem, public = generate()
    (tmp_path / "key.pem").write_bytes(pem)
    policy = tmp_path / "ctrlrun.yaml"  # the policy file `ctrlrun console` finds
    policy.write_text(
        CONSOLE_POLICY.replace(
            "schema: ctrlrun.policy/v1\n",
            f'schema: ctrlrun.policy/v1\napprovers:\n  ada: {{key: "{public}"}}\n',
            1,
        )
    )
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))
    waiting = agents.refund("pay_1", 900_000)
    assert isinstance(waiting, ApprovalRequired)
    approval_id = waiting.request_id
    answers = [EventType.APPROVAL_GRANTED, EventType.APPROVAL_DENIED]

    def answer(console: Console, verb: str) -> tuple[int, str]:
        client = Client(console.url)
        _, html, _ = client.request("GET", "/")
        token = re.search(r'name="csrf" value="([^"]+)"', html)
        assert token is not None
        form = {"csrf": token.group(1), "reason": "no", "action_hash": waiting.action_hash or ""}
        status, body, _ = client.request("POST", f"/approvals/{approval_id}/{verb}", form)
        return status, body

    unsigned = Console(tmp_path, agents.path)  # no --approver-key: it cannot sign
    try:
        for verb, what in (("deny", "denial"), ("grant", "grant")):
            status, body = answer(unsigned, verb)
            assert status == 409 and f"must sign the {what}" in body
    finally:
        unsigned.stop()
    assert not [e for e in agents.store.events() if e.type in answers], "nothing written"
    signing = Console(tmp_path, agents.path, "--approver-key", str(tmp_path / "key.pem"))
    try:
        status, _ = answer(signing, "deny")
        assert status == 303
    finally:
        signing.stop()
    [denied] = [e for e in agents.store.events() if e.type is EventType.APPROVAL_DENIED]
    record = agents.store.get_approval(approval_id)
    assert verify(public, answer_message(record, "ada", grant=False), denied.data["signature"])
