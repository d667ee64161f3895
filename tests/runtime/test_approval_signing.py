"""Signed approvals: when the policy names approvers with Ed25519 keys, only a grant signed by
one of them authorises the call. A grant row written without the private key (an agent with
write access to the store) or signed with another key is refused where it is consumed, on
both stores; a signed grant runs the call and its signature goes into the receipt."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import (
    ApprovalMismatch,
    ApprovalRequired,
    Control,
    InvalidArgument,
    MismatchReason,
)
from ctrlrun.config import load_policy_text
from ctrlrun.kernel.signing import generate, record_message, sign, verify

BOB_PEM, BOB_KEY = generate()
MALLORY_PEM, MALLORY_KEY = generate()

POLICY = f"""\
schema: ctrlrun.policy/v1
approvers:
  bob: {{key: "{BOB_KEY}"}}
actions:
  k8s.namespace.delete:
    decision: approve
    effect: "ns:{{name}}"
"""


@pytest.fixture
def signed(store, clock):
    return Control(load_policy_text(POLICY), store, clock=clock)


@pytest.fixture
def ran():
    return []


@pytest.fixture
def delete(signed, ran):
    @ctrlrun.protect("k8s.namespace.delete", control=signed)
    def delete(name: str):
        ran.append(name)
        return name

    return delete


def request(delete):
    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalRequired) as needed:
        delete("prod")
    return needed.value.request_id


def run(delete):
    with ctrlrun.context("ops-bot"):
        return delete("prod")


def test_a_signed_grant_runs_the_call_and_the_receipt_carries_the_signature(
    signed, delete, store, ran
):
    approval_id = request(delete)
    signed.approvals.grant(approval_id, "bob", private_key=BOB_PEM)
    assert run(delete) == "prod" and ran == ["prod"]
    [receipt] = [r for r in store.receipts() if r["result"] == "committed"]
    [entry] = receipt["approval_signatures"]
    assert entry["approver"] == "bob" and receipt["approver"] == "bob"
    record = store.get_approval(approval_id)
    assert verify(BOB_KEY, record_message(record, "bob"), entry["signature"])
    assert store.verify_chain().ok


def test_a_grant_row_without_a_signature_is_refused_at_consumption(delete, store, ran):
    approval_id = request(delete)
    store.grant_approval(approval_id, "bob")  # what an agent with the store's password can do
    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalMismatch) as refused:
        delete("prod")
    assert refused.value.reason is MismatchReason.UNSIGNED and ran == []


def test_a_grant_signed_with_another_key_is_refused_at_consumption(delete, store, ran):
    approval_id = request(delete)
    record = store.get_approval(approval_id)
    forged = sign(MALLORY_PEM, record_message(record, "bob"))
    store.grant_approval(approval_id, "bob", forged)
    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalMismatch) as refused:
        delete("prod")
    assert refused.value.reason is MismatchReason.UNSIGNED and ran == []


def test_a_signature_over_another_request_does_not_transfer(delete, store, ran):
    approval_id = request(delete)
    record = store.get_approval(approval_id)
    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalRequired) as other:
        delete("staging")
    elsewhere = store.get_approval(other.value.request_id)
    store.grant_approval(approval_id, "bob", sign(BOB_PEM, record_message(elsewhere, "bob")))
    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalMismatch):
        delete("prod")
    assert ran == [] and record.approval_id == approval_id


def test_the_api_refuses_what_would_not_verify_and_writes_nothing(signed, delete, store):
    approval_id = request(delete)
    for approver, key in [("bob", None), ("bob", MALLORY_PEM), ("mallory", MALLORY_PEM)]:
        with pytest.raises(InvalidArgument):
            signed.approvals.grant(approval_id, approver, private_key=key)
    assert store.get_approval(approval_id).status.value == "pending"


def test_approver_keys_are_validated_at_load():
    with pytest.raises(ctrlrun.PolicyError) as bad:
        load_policy_text(POLICY.replace(BOB_KEY, "ed25519:notbase64!"))
    assert "approvers.bob.key" in bad.value.message
    assert load_policy_text(POLICY).approvers == {"bob": BOB_KEY}
