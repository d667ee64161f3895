"""``ctrlrun approvals``, ``approve`` and ``deny``: a person answering an agent from the shell."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import ctrlrun
from ctrlrun import ApprovalStatus
from support.cli import Scene, refused, run


def test_pending_shows_what_waits_and_the_action_it_would_authorise(scene):
    approval_id = scene.pending("pay_3", 200_000)
    result = run("approvals", "--pending")
    assert result.exit_code == 0
    header, row = result.stdout.splitlines()
    assert header.split() == [
        "APPROVAL",
        "STATUS",
        "EXPIRES",
        "ACTION",
        "REQUESTED",
        "BY",
        "ENVIRONMENT",
        "RULE",
        "NEEDS",
        "EFFECT",
        "ARGUMENTS",
    ]
    expires = scene.store.get_approval(approval_id).expires_at
    assert row.split()[:5] == [
        approval_id,
        "pending",
        expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "stripe.refund",
        "support-bot/alice",
    ]
    assert row.endswith('{"amount": 200000, "payment_id": "pay_3"}')


def test_approve_grants_as_cli_local_and_the_agent_then_runs_once(scene):
    approval_id = scene.pending("pay_3", 200_000)
    result = run("approve", approval_id)
    assert result.exit_code == 0
    granted, expires = result.stdout.splitlines()
    assert granted == (
        f"granted {approval_id} by cli:local: stripe.refund"
        ' {"amount": 200000, "payment_id": "pay_3"} for support-bot/alice'
    )
    record = scene.store.get_approval(approval_id)
    assert expires.startswith("expires ") and record.action_hash in expires
    assert (record.status, record.approver) == (ApprovalStatus.GRANTED, "cli:local")
    assert scene.refund("pay_3", 200_000, approval=approval_id) == {"refund": "re_1"}
    receipt = scene.receipt_for("refund:pay_3")
    assert (receipt["approval_id"], receipt["approver"]) == (approval_id, "cli:local")
    assert run("approvals", "--pending").stdout == "nothing waits for a human\n"
    assert "consumed (granted by cli:local)" in run("approvals").stdout


def test_deny_denies_the_agents_call(scene):
    approval_id = scene.pending("pay_3", 200_000)
    result = run("deny", approval_id)
    assert result.exit_code == 0
    assert result.stdout.startswith(f"denied {approval_id} by cli:local: stripe.refund")
    outcome = scene.refund("pay_3", 200_000, approval=approval_id)
    assert isinstance(outcome, ctrlrun.ActionDenied) and scene.remote_calls == []
    assert "denied by cli:local" in run("approvals").stdout


def test_answering_twice_or_an_unknown_id_is_refused_and_writes_nothing(scene):
    approval_id = scene.pending()
    run("approve", approval_id)
    before = scene.store.events()
    refused(run("approve", approval_id), approval_id, "already granted")
    refused(run("deny", approval_id), "already granted")
    refused(run("approve", "apr_nobody"), "apr_nobody is unknown")
    refused(run("deny", "apr_nobody"), "unknown")
    assert scene.store.events() == before


def test_an_expired_request_shows_so_and_cannot_be_granted(project):
    (project / ".ctrlrun").mkdir()
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)  # expiry is 15 minutes
    scene = Scene(project, start=an_hour_ago)
    try:
        approval_id = scene.pending()
        assert "pending (expired)" in run("approvals", "--pending").stdout
        [document] = map(json.loads, run("approvals", "--json").stdout.splitlines())
        assert (document["status"], document["expired"]) == ("pending", True)
        refused(run("approve", approval_id), "expired")
    finally:
        scene.close()


def test_json_is_one_document_per_line_with_stable_fields(scene):
    first = scene.pending("pay_3")
    scene.clock.advance(timedelta(seconds=1))  # listed by request time
    second = scene.pending("pay_4", 300_000)
    run("approve", first)
    documents = [json.loads(line) for line in run("approvals", "--json").stdout.splitlines()]
    assert [d["approval_id"] for d in documents] == [first, second]
    assert set(documents[0]) == {
        "approval_id",
        "status",
        "expired",
        "action",
        "action_hash",
        "policy_hash",
        "created_at",
        "expires_at",
        "approver",
        "answered_at",
        "consumed_at",
        "consumed_by",
        "deny_reason",
        "answers",
        "rule",
        "rule_text",
        "effect_key",
        "effect_state",
        "environment",
        "approvals_needed",
        "arguments_shown",
        "budget",
        "budget_text",
        "budget_now",
    }
    assert documents[0]["budget"] is None  # an unbudgeted action's request
    assert documents[0]["approver"] == "cli:local"
    assert documents[1]["action"]["arguments"] == {"amount": 300_000, "payment_id": "pay_4"}
    pending = run("approvals", "--pending", "--json").stdout.splitlines()
    assert [json.loads(line)["approval_id"] for line in pending] == [second]


def test_no_requests_yet(scene):
    assert run("approvals").stdout == "no approval requests yet\n"
    assert run("approvals", "--json").stdout == ""
