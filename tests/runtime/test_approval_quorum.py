"""``approval: {count: N, distinct_from_requester: true}``: a request is granted by N distinct
approvers, never by the agent or user that asked, and the call that presents it is checked
against the policy it runs under (a grant row written by hand does not pass). Both stores."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import (
    ApprovalMismatch,
    ApprovalRequired,
    ApprovalStatus,
    Control,
    MismatchReason,
)
from ctrlrun.config import load_policy_text

POLICY = """\
schema: ctrlrun.policy/v1
approvals: {distinct_from_requester: true}
actions:
  iam.grant_role:
    decision: approve
    effect: "grant:{user}:{role}"
    approval: {count: 2, ttl: 1h}
  k8s.namespace.delete:
    decision: approve
    effect: "ns:{name}"
"""


@pytest.fixture
def quorum(store, clock):
    return Control(load_policy_text(POLICY), store, clock=clock)


@pytest.fixture
def ran():
    return []


@pytest.fixture
def grant_role(quorum, ran):
    @ctrlrun.protect("iam.grant_role", control=quorum)
    def grant_role(user: str, role: str):
        ran.append((user, role))
        return "granted"

    return grant_role


def ask(fn, *args, agent="ops-bot", user="alice"):
    with ctrlrun.context(agent, user), pytest.raises(ApprovalRequired) as needed:
        fn(*args)
    return needed.value.request_id


def call(fn, *args, agent="ops-bot", user="alice"):
    with ctrlrun.context(agent, user):
        return fn(*args)


def test_two_distinct_approvers_are_needed(grant_role, store, ran):
    request = ask(grant_role, "mallory", "admin")
    first = store.grant_approval(request, "bob")
    assert first.status is ApprovalStatus.PENDING and first.required == 2
    assert ask(grant_role, "mallory", "admin") == request  # still waiting: the same request
    with pytest.raises(ApprovalMismatch) as twice:
        store.grant_approval(request, "bob")
    assert twice.value.reason is MismatchReason.ANSWERED
    done = store.grant_approval(request, "carol")
    assert done.status is ApprovalStatus.GRANTED and done.approver == "bob, carol"
    assert call(grant_role, "mallory", "admin") == "granted" and ran == [("mallory", "admin")]
    [receipt] = [r for r in store.receipts() if r["result"] == "committed"]
    assert receipt["approver"] == "bob, carol"


def test_the_requester_cannot_approve(quorum, store):
    @ctrlrun.protect("k8s.namespace.delete", control=quorum)
    def delete(name: str):
        return name

    request = ask(delete, "prod")
    for itself in ("ops-bot", "alice"):
        with pytest.raises(ApprovalMismatch) as refused:
            store.grant_approval(request, itself)
        assert refused.value.reason is MismatchReason.REQUESTER
    assert store.get_approval(request).status is ApprovalStatus.PENDING
    store.grant_approval(request, "bob")
    assert call(delete, "prod") == "prod"


def test_a_row_flipped_to_granted_is_refused_at_consumption(grant_role, store, ran):
    request = ask(grant_role, "mallory", "admin")
    store.grant_approval(request, "bob")

    def forge(txn):
        txn.run(
            "approval_answer",
            {"approval_id": request, "status": "granted", "approver": "bob", "answered_at": None},
        )

    store.transact(forge)
    with ctrlrun.context("ops-bot", "alice"), pytest.raises(ApprovalMismatch) as refused:
        grant_role("mallory", "admin")
    assert refused.value.reason is MismatchReason.PENDING
    assert "1 of the 2" in refused.value.message and ran == []
