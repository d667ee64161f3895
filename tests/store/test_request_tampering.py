"""A pending request rewritten in the database itself (the SQLite file, the Postgres schema)
as an attacker with the store's credentials would: its stored action changed, its
``action_hash`` left alone. Every surface that shows or answers it recomputes the hash from
the stored document: the API and the CLI show it as tampering, never as a request, refuse to
grant, deny or sign it, and record the attempt as an event; the identical call is refused.
Under named approvers every answer is signed, a denial too."""

from __future__ import annotations

import json
from typing import Any

import pytest

import ctrlrun
from ctrlrun import ApprovalMismatch, ApprovalRequired, Control, InvalidArgument, MismatchReason
from ctrlrun.config import load_policy_text
from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.kernel.event import EventType
from ctrlrun.kernel.signing import DENIAL_SIGNING_SCHEMA, answer_message, generate, verify
from support.cli import refused, run

BOB_PEM, BOB_KEY = generate()
MALLORY_PEM, _ = generate()

POLICY = f"""\
schema: ctrlrun.policy/v1
approvers:
  bob: {{key: "{BOB_KEY}"}}
actions:
  stripe.refund:
    decision: approve
    effect: "refund:{{payment_id}}"
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The policy file the CLI finds, and nothing else from the environment."""
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(POLICY)
    monkeypatch.setenv("CTRLRUN_CONFIG", str(path))
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    (tmp_path / "bob.pem").write_bytes(BOB_PEM)
    (tmp_path / "mallory.pem").write_bytes(MALLORY_PEM)
    return tmp_path


@pytest.fixture
def control(backend, project):
    store = backend.open()  # the real clock: the CLI reads the same requests
    yield Control(load_policy_text(POLICY), store)
    store.close()


@pytest.fixture
def ran():
    return []


@pytest.fixture
def refund(control, ran):
    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        ran.append((payment_id, amount))
        return "re_1"

    return refund


def ask(refund, amount: int = 900_000) -> str:
    with ctrlrun.context("support-bot"), pytest.raises(ApprovalRequired) as needed:
        refund(payment_id="pay_1", amount=amount)
    return needed.value.request_id


def rewrite_arguments(backend, approval_id: str) -> None:
    """What the attacker does: the person is to see 9 where the call will refund 900000."""
    backend.tamper(
        "UPDATE approvals SET action_json = replace(action_json, '\"amount\": 900000',"
        f" '\"amount\": 9') WHERE approval_id = '{approval_id}'"
    )


def url_of(backend) -> str:
    if backend.name == "sqlite":
        return f"sqlite://{backend.path}"
    return with_schema(backend.pg_schema.url, backend.pg_schema.schema)


def tamper_events(store, approval_id: str) -> list[Any]:
    return [
        e
        for e in store.events()
        if e.type is EventType.APPROVAL_INVALIDATED
        and e.approval_id == approval_id
        and e.data.get("reason") == "tampered"
    ]


def expect_tampered(call, *args: Any, **kwargs: Any) -> ApprovalMismatch:
    with pytest.raises(ApprovalMismatch) as refusal:
        call(*args, **kwargs)
    assert refusal.value.reason is MismatchReason.TAMPERED
    return refusal.value


# --- the API ------------------------------------------------------------------------------


def test_the_api_shows_tampering_and_refuses_to_answer_or_sign(backend, control, refund, ran):
    approval_id = ask(refund)
    rewrite_arguments(backend, approval_id)
    store = control.store
    assert control.approvals.pending() == ()  # never shown as a request
    assert [r.approval_id for r in control.approvals.tampered()] == [approval_id]
    assert len(tamper_events(store, approval_id)) == 1
    control.approvals.pending()
    assert len(tamper_events(store, approval_id)) == 1, "a listing records it once"
    expect_tampered(control.approvals.get, approval_id)
    arguments = {"payment_id": "pay_1", "amount": 900_000}
    who = ctrlrun.Principal("support-bot")
    expect_tampered(control.approvals.for_action, "stripe.refund", arguments, who)
    expect_tampered(control.evaluate, "stripe.refund", arguments, who)
    expect_tampered(control.approvals.grant, approval_id, "bob", private_key=BOB_PEM)
    expect_tampered(control.approvals.deny, approval_id, "bob", "no", private_key=BOB_PEM)
    record = store.get_approval(approval_id)
    expect_tampered(answer_message, record, "bob", grant=True)  # nothing to sign over
    assert record.status is ctrlrun.ApprovalStatus.PENDING
    assert not store.read(lambda txn: txn.all("approval_grant_list", {"approval_id": approval_id}))
    assert not [e for e in store.events() if e.type is EventType.APPROVAL_GRANTED]
    assert len(tamper_events(store, approval_id)) == 4  # each refused answer is recorded


def test_the_identical_call_is_refused_with_the_tampering_recorded(backend, control, refund, ran):
    approval_id = ask(refund)
    rewrite_arguments(backend, approval_id)
    with ctrlrun.context("support-bot"), pytest.raises(ApprovalMismatch) as refusal:
        refund(payment_id="pay_1", amount=900_000)
    assert refusal.value.reason is MismatchReason.TAMPERED
    assert "tampered" in refusal.value.for_model()
    assert ran == []
    assert control.store.receipts()[-1].document["result"] == "blocked"
    assert tamper_events(control.store, approval_id)


def test_an_unsigned_or_wrongly_signed_denial_is_refused_with_nothing_written(control, refund):
    approval_id = ask(refund)
    before = len(control.store.events())
    with pytest.raises(InvalidArgument, match="must sign the denial"):
        control.approvals.deny(approval_id, "bob", "no")
    with pytest.raises(InvalidArgument, match="not the one the policy names"):
        control.approvals.deny(approval_id, "bob", "no", private_key=MALLORY_PEM)
    with pytest.raises(InvalidArgument, match="not an approver the policy names"):
        control.approvals.deny(approval_id, "mallory", "no", private_key=MALLORY_PEM)
    assert control.store.get_approval(approval_id).status is ctrlrun.ApprovalStatus.PENDING
    assert len(control.store.events()) == before
    denied = control.approvals.deny(approval_id, "bob", "no", private_key=BOB_PEM)
    assert denied.status is ctrlrun.ApprovalStatus.DENIED
    event = next(e for e in control.store.events() if e.type is EventType.APPROVAL_DENIED)
    message = answer_message(denied, "bob", grant=False)
    assert DENIAL_SIGNING_SCHEMA.encode() in message
    assert verify(BOB_KEY, message, event.data["signature"])
    assert not verify(BOB_KEY, answer_message(denied, "bob", grant=True), event.data["signature"])


# --- the CLI ------------------------------------------------------------------------------


def test_the_cli_shows_tampering_and_refuses_approve_and_deny(backend, project, control, refund):
    approval_id = ask(refund)
    rewrite_arguments(backend, approval_id)
    url = url_of(backend)
    listed = run("approvals", "--pending", "--store-url", url)
    assert listed.exit_code == 0, listed.output
    assert "TAMPERED" in listed.stdout and '"amount":9' not in listed.stdout
    assert "TAMPERED" in listed.stderr
    document = json.loads(run("approvals", "--json", "--store-url", url).stdout)
    assert document["status"] == "tampered" and document["action"] is None
    assert document["recomputed_hash"] not in (None, document["action_hash"])
    key = str(project / "bob.pem")
    for args in (
        ("approve", approval_id, "--as", "bob", "--key", key),
        ("approve", approval_id, "--as", "bob", "--key", key, "--hash", document["action_hash"]),
        ("deny", approval_id, "--as", "bob", "--key", key, "--reason", "no"),
    ):
        refused(run(*args, "--store-url", url), f"approval {approval_id} was tampered with")
    store = control.store
    assert store.get_approval(approval_id).status is ctrlrun.ApprovalStatus.PENDING
    assert len(tamper_events(store, approval_id)) == 4  # the listing once, each answer once


def test_the_cli_refuses_an_unsigned_answer_under_named_approvers(
    backend, project, control, refund
):
    approval_id = ask(refund)
    url = url_of(backend)
    before = len(control.store.events())
    refused(run("approve", approval_id, "--as", "bob", "--store-url", url), "must be signed")
    refused(run("deny", approval_id, "--as", "bob", "--store-url", url), "must be signed")
    mallory = str(project / "mallory.pem")
    refused(
        run("deny", approval_id, "--as", "bob", "--key", mallory, "--store-url", url),
        "not the one the policy names",
    )
    assert control.store.get_approval(approval_id).status is ctrlrun.ApprovalStatus.PENDING
    assert len(control.store.events()) == before, "a refused answer writes nothing"
    bob = str(project / "bob.pem")
    done = run("deny", approval_id, "--as", "bob", "--key", bob, "--store-url", url)
    assert done.exit_code == 0, done.output
    assert control.store.get_approval(approval_id).status is ctrlrun.ApprovalStatus.DENIED


def test_a_signed_cli_grant_binds_the_recomputed_hash(backend, project, control, refund, ran):
    approval_id = ask(refund)
    bob = str(project / "bob.pem")
    done = run("approve", approval_id, "--as", "bob", "--key", bob, "--store-url", url_of(backend))
    assert done.exit_code == 0, done.output
    with ctrlrun.context("support-bot"):
        assert refund(payment_id="pay_1", amount=900_000) == "re_1"
    assert ran == [("pay_1", 900_000)]
