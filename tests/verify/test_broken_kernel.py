"""Verify must be able to fail: with the duplicate guard removed from the store — in this
process and, through sitecustomize, in every worker process — G3 and G4 FAIL with a
counterexample, while the guarantees that do not rest on that guard still pass."""

from __future__ import annotations

from ctrlrun.verify import Status, run
from support.mutations import apply_mutation
from support.policies import POLICY
from support.subprocess_env import inject


def test_removing_the_duplicate_guard_fails_g3_and_g4(monkeypatch, policy):
    inject(monkeypatch, mutation="no-duplicate-guard")
    apply_mutation("no-duplicate-guard", monkeypatch.setattr)
    report = run(policy(POLICY))
    by_id = {r.gid: r for r in report.results}
    g3, g4 = by_id["G3"], by_id["G4"]
    assert g3.status is Status.FAIL and "executor ran 2 times on one effect key" in g3.detail
    key = "charge:ctrlrun-verify-charge_id"
    raced = [r for r in g3.counterexample["receipts"] if r["effect_key"] == key]
    assert len(raced) >= 2 and raced[0]["result"] == "committed"
    # G4's race runs only in the children: its failure proves the mutation reached them
    assert g4.status is Status.FAIL and "the executor ran 8 times" in g4.detail, g4.detail
    assert len(g4.counterexample["receipts"]) >= 2
    # G10's control is the in-progress refusal this mutation also removes
    assert by_id["G10"].status is Status.FAIL
    unrelated = {gid: by_id[gid].status for gid in ("G1", "G2", "G5", "G6", "G7", "G8", "G9")}
    assert set(unrelated.values()) == {Status.PASS}, unrelated
    assert report.exit_code == 1


def test_a_verifier_that_ignores_checkpoints_fails_g12(monkeypatch, policy):
    # the chain walk as it was before checkpoints: what a cut tail with a rewound head got
    from ctrlrun.kernel import receipt

    walk = receipt.verify_chain

    def blind(rows, head, *, anchor=None, checkpoints=None, partition=0):
        return walk(rows, head, anchor=anchor, partition=partition)

    monkeypatch.setattr("ctrlrun.kernel.evidence_check.verify_chain", blind)  # the one walk
    report = run(policy(POLICY), only=["G9", "G12"])
    by_id = {r.gid: r for r in report.results}
    assert by_id["G9"].status is Status.PASS
    g12 = by_id["G12"]
    assert g12.status is Status.FAIL, g12.detail
    assert "after cutting the tail the chain reports nothing" in g12.detail
    assert report.exit_code == 1
