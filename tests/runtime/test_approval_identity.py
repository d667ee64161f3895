"""Approvers are compared as identities (``kernel.identity``: NFKC, trimmed, case-folded, the
UTS #39 confusable skeleton): the requester under another spelling is still the requester, and
two look-alike approvers are one approver — when granting and again at consumption, sync and
async. Both stores."""

from __future__ import annotations

import asyncio

import pytest

import ctrlrun
from ctrlrun import ApprovalMismatch, ApprovalRequired, ApprovalStatus, Control, MismatchReason
from ctrlrun.config import load_policy_text

POLICY = """\
schema: ctrlrun.policy/v1
approvals: {distinct_from_requester: true}
actions:
  stripe.refund:
    decision: approve
    effect: "refund:{payment_id}"
  iam.grant_role:
    decision: approve
    effect: "grant:{user}:{role}"
    approval: {count: 2, ttl: 1h}
"""

# The requester "support-bot" under other spellings: a trailing space, another case, Cyrillic
# U+0455, U+0440 and U+043E (s, p, o), fullwidth letters, digit zero. (A zero-width space is
# refused as a name before any comparison: check_person.)
SPELLINGS = (
    "support-bot ",
    "Support-Bot",
    "\u0455u\u0440\u0440\u043ert-b\u043et",
    "\uff53\uff55\uff50\uff50\uff4f\uff52\uff54-bot",
    "SUPPORT-B0T",
)
BOB_CYRILLIC = "\u0412\u043eb"  # U+0412 and U+043E (B, o), Latin b: looks like "Bob"


@pytest.fixture
def control(store, clock):
    return Control(load_policy_text(POLICY), store, clock=clock)


@pytest.fixture
def ran():
    return []


@pytest.fixture
def refund(control, ran):
    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str):
        ran.append(payment_id)
        return "refunded"

    return refund


@pytest.fixture
def grant_role(control, ran):
    @ctrlrun.protect("iam.grant_role", control=control)
    def grant_role(user: str, role: str):
        ran.append((user, role))
        return "granted"

    return grant_role


def ask(fn, *args):
    with ctrlrun.context("support-bot"), pytest.raises(ApprovalRequired) as needed:
        fn(*args)
    return needed.value.request_id


@pytest.mark.parametrize("spelling", SPELLINGS, ids=ascii)
def test_the_requester_under_another_spelling_cannot_approve(refund, store, spelling):
    request = ask(refund, "pay_1")
    with pytest.raises(ApprovalMismatch) as refused:
        store.grant_approval(request, spelling)
    assert refused.value.reason is MismatchReason.REQUESTER
    assert store.get_approval(request).status is ApprovalStatus.PENDING
    assert store.grant_approval(request, "alice").status is ApprovalStatus.GRANTED  # control


def test_two_look_alike_approvers_count_once(grant_role, store, ran):
    request = ask(grant_role, "mallory", "admin")
    assert store.grant_approval(request, "Bob").status is ApprovalStatus.PENDING
    for twin in (BOB_CYRILLIC, " bob", "BOB"):
        with pytest.raises(ApprovalMismatch) as refused:
            store.grant_approval(request, twin)
        assert refused.value.reason is MismatchReason.ANSWERED
    assert store.get_approval(request).status is ApprovalStatus.PENDING
    assert store.grant_approval(request, "carol").status is ApprovalStatus.GRANTED
    with ctrlrun.context("support-bot"):
        assert grant_role("mallory", "admin") == "granted"
    assert ran == [("mallory", "admin")]


def forge_lookalike_quorum(store, request):
    """Grants by "Bob" and its Cyrillic look-alike written straight into the store, the row flipped
    to granted: what a store writer who skips ``plan_grant`` leaves behind."""
    store.grant_approval(request, "Bob")

    def forge(txn):
        grant = {"approval_id": request, "approver": BOB_CYRILLIC, "signature": None}
        txn.run("approval_grant_insert", {**grant, "granted_at": txn.ts(txn.now)})
        answer = {"approval_id": request, "status": "granted", "approver": "Bob, " + BOB_CYRILLIC}
        txn.run("approval_answer", {**answer, "answered_at": txn.ts(txn.now)})

    store.transact(forge)
    assert store.get_approval(request).status is ApprovalStatus.GRANTED


def test_look_alike_grants_do_not_make_a_quorum_at_consumption(grant_role, store, ran):
    request = ask(grant_role, "mallory", "admin")
    forge_lookalike_quorum(store, request)
    with ctrlrun.context("support-bot"), pytest.raises(ApprovalMismatch) as refused:
        grant_role("mallory", "admin")
    assert refused.value.reason is MismatchReason.PENDING
    assert "1 of the 2" in refused.value.message and ran == []


def test_look_alike_grants_do_not_make_a_quorum_async(control, store, ran):
    @ctrlrun.protect("iam.grant_role", control=control)
    async def grant_role(user: str, role: str):
        ran.append((user, role))
        return "granted"

    async def call():
        with ctrlrun.context("support-bot"):
            return await grant_role("mallory", "admin")

    with pytest.raises(ApprovalRequired) as needed:
        asyncio.run(call())
    forge_lookalike_quorum(store, needed.value.request_id)
    with pytest.raises(ApprovalMismatch) as refused:
        asyncio.run(call())
    assert refused.value.reason is MismatchReason.PENDING and ran == []


def test_a_grant_by_the_requester_look_alike_is_refused_at_consumption(refund, store, ran):
    request = ask(refund, "pay_2")

    def forge(txn):
        grant = {"approval_id": request, "approver": "Support-Bot ", "signature": None}
        txn.run("approval_grant_insert", {**grant, "granted_at": txn.ts(txn.now)})
        answer = {"approval_id": request, "status": "granted", "approver": "Support-Bot "}
        txn.run("approval_answer", {**answer, "answered_at": txn.ts(txn.now)})

    store.transact(forge)
    with ctrlrun.context("support-bot"), pytest.raises(ApprovalMismatch) as refused:
        refund("pay_2")
    assert refused.value.reason is MismatchReason.REQUESTER and ran == []
