"""One verifier, the strongest: ``store.verify_chain()`` and ``ctrlrun receipts
--verify-chain`` report the same named breaks, on both stores. Beyond the chain, each receipt
that cites an approval is checked against the stored request and its grants: a grant spent
twice (the consumed request reset to ``granted`` by someone with the store's credentials, the
call run again), a cited request deleted, grants deleted below the quorum or stripped of their
signatures after the call committed."""

from __future__ import annotations

import json

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, Control
from ctrlrun.config import load_policy_text
from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.kernel.signing import generate
from support.cli import run

BOB_PEM, BOB_KEY = generate()
CAROL_PEM, CAROL_KEY = generate()

POLICY = f"""\
schema: ctrlrun.policy/v1
approvers:
  bob: {{key: "{BOB_KEY}"}}
  carol: {{key: "{CAROL_KEY}"}}
actions:
  stripe.refund:
    decision: approve
    effect: "refund:{{payment_id}}"
  k8s.delete:
    decision: approve
    approval: {{count: 2}}
"""


@pytest.fixture
def policy_file(tmp_path, monkeypatch):
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(POLICY)
    monkeypatch.setenv("CTRLRUN_CONFIG", str(path))
    monkeypatch.delenv("CTRLRUN_STORE_URL", raising=False)
    return path


@pytest.fixture
def control(backend, policy_file):
    store = backend.open()
    yield Control(load_policy_text(POLICY), store)
    store.close()


@pytest.fixture
def ran():
    return []


@pytest.fixture
def refund(control, ran):
    @ctrlrun.protect("stripe.refund", control=control)
    def refund(payment_id: str, amount: int) -> str:
        ran.append(payment_id)
        return "re_1"

    return refund


@pytest.fixture
def delete(control, ran):
    @ctrlrun.protect("k8s.delete", control=control)
    def delete(name: str) -> str:
        ran.append(name)
        return name

    return delete


def approved(control, call, *granters, **arguments):
    """Run ``call`` once through a request that ``granters`` grant, signed."""
    with ctrlrun.context("ops-bot"), pytest.raises(ApprovalRequired) as needed:
        call(**arguments)
    approval_id = needed.value.request_id
    for name, pem in granters:
        control.approvals.grant(approval_id, name, private_key=pem)
    with ctrlrun.context("ops-bot"):
        call(**arguments)
    return approval_id


def breaks(store, policy=None):
    report = store.verify_chain() if policy is None else store.verify_chain(policy)
    return [(str(b.kind), b.seq) for b in report.breaks]


def cli_breaks(backend):
    url = (
        f"sqlite://{backend.path}"
        if backend.name == "sqlite"
        else with_schema(backend.pg_schema.url, backend.pg_schema.schema)
    )
    result = run("receipts", "--verify-chain", "--json", "--store-url", url)
    assert result.exit_code in (0, 1), result.output
    return [(b["kind"], b["seq"]) for b in json.loads(result.stdout)["breaks"]]


def last_seq(store):
    return store.receipts()[-1].seq


def test_a_consumed_grant_reset_and_run_again_is_named(backend, control, refund, ran):
    approval_id = approved(control, refund, ("bob", BOB_PEM), payment_id="pay_1", amount=5)
    first = last_seq(control.store)
    assert breaks(control.store) == []
    backend.tamper(
        "UPDATE approvals SET status = 'granted', consumed_at = NULL, consumed_by = NULL"
        f" WHERE approval_id = '{approval_id}'",
        "DELETE FROM effects WHERE effect_key = 'refund:pay_1'",
    )
    with ctrlrun.context("ops-bot"):
        refund(payment_id="pay_1", amount=5)  # the attack: the identical call runs again
    assert ran == ["pay_1", "pay_1"]
    second = last_seq(control.store)
    assert second > first
    expected = [("approval_reused", second)]
    assert breaks(control.store) == expected
    assert breaks(control.store, control.policy) == expected
    assert cli_breaks(backend) == expected


def test_grants_below_the_quorum_after_the_call_are_named(backend, control, delete):
    approval_id = approved(control, delete, ("bob", BOB_PEM), ("carol", CAROL_PEM), name="prod")
    seq = last_seq(control.store)
    assert breaks(control.store) == []
    backend.tamper(
        f"DELETE FROM approval_grants WHERE approval_id = '{approval_id}' AND approver = 'carol'"
    )
    assert breaks(control.store) == [("approval_quorum", seq)]  # the request's own count
    assert breaks(control.store, control.policy) == [("approval_quorum", seq)]
    assert cli_breaks(backend) == [("approval_quorum", seq)]


def test_a_grant_renamed_to_a_look_alike_of_another_approver_is_named(backend, control, delete):
    """The verifier counts approvers as consumption does: 'B0B' and 'bob' are one person."""
    approval_id = approved(control, delete, ("bob", BOB_PEM), ("carol", CAROL_PEM), name="prod")
    seq = last_seq(control.store)
    backend.tamper(
        f"UPDATE approval_grants SET approver = 'B0B' WHERE approval_id = '{approval_id}'"
        " AND approver = 'carol'"
    )
    assert breaks(control.store) == [("approval_quorum", seq)]


def test_grants_stripped_of_their_signatures_are_named(backend, control, refund):
    approval_id = approved(control, refund, ("bob", BOB_PEM), payment_id="pay_2", amount=5)
    seq = last_seq(control.store)
    backend.tamper(
        f"UPDATE approval_grants SET signature = NULL WHERE approval_id = '{approval_id}'"
    )
    assert breaks(control.store, control.policy) == [("approval_unsigned", seq)]
    assert cli_breaks(backend) == [("approval_unsigned", seq)]  # the policy file's keys


def test_a_cited_request_deleted_is_named(backend, control, refund):
    approval_id = approved(control, refund, ("bob", BOB_PEM), payment_id="pay_3", amount=5)
    seq = last_seq(control.store)
    backend.tamper(f"DELETE FROM approvals WHERE approval_id = '{approval_id}'")
    assert breaks(control.store) == [("approval_missing", seq)]
    assert breaks(control.store, control.policy) == [("approval_missing", seq)]
    assert cli_breaks(backend) == [("approval_missing", seq)]


def test_the_cli_reports_an_edited_indexed_column(backend, control, refund):
    approved(control, refund, ("bob", BOB_PEM), payment_id="pay_4", amount=5)
    seq = last_seq(control.store)
    backend.tamper(f"UPDATE receipts SET result = 'failed' WHERE seq = {seq}")
    assert breaks(control.store) == [("column_mismatch", seq)]
    assert cli_breaks(backend) == [("column_mismatch", seq)]
