"""``ctrlrun approver keygen`` and the signed shell answer: ``ctrlrun approve ID --key FILE
--as NAME``; ``--as`` (or ``CTRLRUN_APPROVER``) names who answered in the unsigned mode."""

from __future__ import annotations

import stat

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, Control
from support.cli import refused, run


def test_keygen_writes_a_private_key_0600_and_prints_the_policy_line(empty):
    result = run("approver", "keygen", "bob", "--out", "bob.pem")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:3] == [
        "wrote bob's private key to bob.pem (0600): keep it where only bob can read it",
        "add to the policy:",
        "approvers:",
    ]
    assert lines[3].startswith('  bob: {key: "ed25519:')
    assert stat.S_IMODE((empty / "bob.pem").stat().st_mode) == 0o600
    refused(run("approver", "keygen", "bob", "--out", "bob.pem"), "never overwritten")


def test_a_signed_shell_grant_runs_the_call(empty):
    from ctrlrun.kernel.signing import public_key_text

    run("approver", "keygen", "bob", "--out", "bob.pem")
    run("approver", "keygen", "carol", "--out", "carol.pem")
    bob = public_key_text((empty / "bob.pem").read_bytes())
    policy = empty / "ctrlrun.yaml"
    policy.write_text(
        f'schema: ctrlrun.policy/v1\napprovers:\n  bob: {{key: "{bob}"}}\nactions:\n'
        '  k8s.namespace.delete:\n    decision: approve\n    effect: "ns:{name}"\n'
    )
    control = Control.from_file(str(policy), create=True)

    @ctrlrun.protect("k8s.namespace.delete", control=control)
    def delete(name: str):
        return name

    try:
        with ctrlrun.context("ops-bot"):
            with pytest.raises(ApprovalRequired) as needed:
                delete("prod")
            approval_id = needed.value.request_id
            refused(run("approve", approval_id, "--key", "carol.pem", "--as", "bob"), "not the one")
            refused(run("approve", approval_id, "--key", "carol.pem", "--as", "carol"), "names")
            granted = run("approve", approval_id, "--key", "bob.pem", "--as", "bob")
            assert granted.exit_code == 0, granted.output
            assert delete("prod") == "prod"
        [receipt] = [r for r in control.store.receipts() if r["result"] == "committed"]
        assert receipt["approval_signatures"][0]["approver"] == "bob"
    finally:
        control.store.close()


def test_as_names_who_answered(scene, monkeypatch):
    approval_id = scene.pending()
    result = run("approve", approval_id, "--as", "dana")
    assert result.exit_code == 0 and f"granted {approval_id} by dana" in result.stdout
    assert scene.store.get_approval(approval_id).approver == "dana"
    other = scene.pending("pay_9")
    monkeypatch.setenv("CTRLRUN_APPROVER", "erin")
    assert "by erin: stripe.refund" in run("deny", other, "--reason", "no").stdout
