"""Guarantees on crafted policies: N/A is exact and true, selection is deterministic, and a
misbehaving positive control is a FAIL, never a pass."""

from __future__ import annotations

import pytest

from ctrlrun.config import load_policy_text
from ctrlrun.verify import GUARANTEES, ConfigRefused, Status, run
from ctrlrun.verify.report import Result, VerifyReport
from support.mutations import apply_mutation
from support.policies import POLICY

READ_ONLY = """\
schema: ctrlrun.policy/v1
actions:
  crm.read:
    decision: allow
"""
ALL_DENIED = """\
schema: ctrlrun.policy/v1
actions:
  iam.grant_admin:
    decision: deny
  db.drop:
    effect: "drop:{name}"
    decision: deny
"""
ONE_FIXED_KEY = """\
schema: ctrlrun.policy/v1
actions:
  door.open:
    effect: "door:{door}"
    max_attempts: 1
    rules:
      - when: {door_eq: front}
        decision: allow
      - decision: deny
"""
NO_ACTIONS = "schema: ctrlrun.policy/v1\nactions: {}\n"
NO_APPROVE = "no action can be decided `approve` (no approve rule or decision)"
NO_EFFECT = "no admitted action declares an effect (an `effect:` key template)"
DENIED = "every action in the document is denied, so nothing admitted can be exercised"


def statuses(report: VerifyReport) -> dict[str, tuple[str, str]]:
    return {
        r.gid: (str(r.status), r.detail if r.status is Status.NOT_APPLICABLE else "")
        for r in report.results
    }


def test_a_read_only_policy(policy):
    report = run(
        policy(READ_ONLY), only=["G1", "G2", "G3", "G4", "G5", "G6", "G7", "G8", "G9", "G10"]
    )
    assert statuses(report) == {
        "G1": ("n/a", NO_APPROVE),
        "G2": ("n/a", NO_APPROVE),
        "G3": ("n/a", NO_EFFECT),
        "G4": ("n/a", NO_EFFECT),
        "G5": ("n/a", NO_EFFECT),
        "G6": ("pass", ""),
        "G7": ("pass", ""),
        "G8": ("pass", ""),
        "G9": ("pass", ""),
        "G10": ("n/a", NO_EFFECT),
    }
    assert report.exit_code == 0
    assert "receipt" in report.results[7].detail  # G8 on an action without an effect key


def test_a_policy_that_denies_everything(policy):
    report = run(policy(ALL_DENIED), only=["G3", "G6", "G7", "G8", "G9", "G12"])
    assert statuses(report) == {
        "G3": ("n/a", NO_EFFECT),
        "G6": ("n/a", DENIED),
        "G7": ("n/a", DENIED),
        "G8": ("n/a", DENIED),
        "G9": ("pass", ""),  # denials are receipted too
        "G12": ("pass", ""),
    }
    assert report.results[-1].action == "db.drop (decision: deny)"


def test_one_fixed_key_and_one_attempt(policy):
    report = run(policy(ONE_FIXED_KEY), only=["G3", "G4", "G5", "G8", "G10"])
    assert statuses(report) == {
        "G3": ("pass", ""),
        "G4": (
            "n/a",
            "no admitted action's effect key can take 9 distinct values (the race needs one"
            " and the positive control 8 others)",
        ),
        "G5": (
            "n/a",
            "every admitted action with an effect has max_attempts: 1, so no retry is ever"
            " admitted and a blind retry cannot be told from any retry",
        ),
        "G8": (
            "n/a",
            "door.open forms one effect key and allows one attempt, so no key is left for the"
            " control",
        ),
        "G10": ("pass", ""),
    }


def test_nothing_applicable_is_exit_2_never_green(policy):
    report = run(policy(NO_ACTIONS))
    assert {r.status for r in report.results} == {Status.NOT_APPLICABLE}
    assert report.applicable == 0 and report.exit_code == 2
    assert report.summary().endswith("nothing applicable, nothing proven")


CHEAP = ["G1", "G2", "G3", "G5", "G6", "G7", "G8", "G9", "G10"]


def test_selection_and_results_are_deterministic(policy):
    first = run(policy(POLICY), only=CHEAP)
    second = run(policy(POLICY), only=CHEAP)
    assert [(r.gid, r.status, r.action, r.detail) for r in first.results] == [
        (r.gid, r.status, r.action, r.detail) for r in second.results
    ]
    assert {r.status for r in first.results} == {Status.PASS}


@pytest.mark.parametrize("gid", ["G3", "G5", "G6", "G8", "G10"])
def test_a_control_that_cannot_succeed_is_a_fail_never_a_pass(gid, monkeypatch, policy):
    apply_mutation("refuses-everything", monkeypatch.setattr)
    result = run(policy(POLICY), only=[gid]).results[0]
    assert result.status is Status.FAIL, result
    assert "control" in result.detail, result.detail
    assert result.counterexample is not None


def test_an_unknown_id_is_refused():
    with pytest.raises(ConfigRefused, match="no such guarantee: G99"):
        run(policy_of_nothing(), only=["G99"])


def policy_of_nothing():

    return load_policy_text(NO_ACTIONS)


def test_verifys_own_error_is_exit_3(monkeypatch, policy):
    import ctrlrun.verify.runner as runner

    def broken(lab):
        raise RuntimeError("a bug in verify")

    g3 = next(g for g in GUARANTEES if g.gid == "G3")
    monkeypatch.setattr(runner, "GUARANTEES", (runner.Guarantee("G3", g3.name, broken),))
    report = run(policy(POLICY), only=["G3"])
    assert report.results[0].status is Status.ERROR and report.exit_code == 3
    assert "verify's own error: RuntimeError: a bug in verify" in report.results[0].detail


def test_the_report_renders_rows_json_and_junit():
    report = VerifyReport(
        "ctrlrun.yaml",
        "sha256:" + "ab" * 32,
        "sqlite",
        (
            Result("G1", "mutated approval refused", Status.PASS, "a.b (rule[0]: approve)", "ok"),
            Result(
                "G3",
                "duplicate effect refused",
                Status.FAIL,
                "c.d (decision: allow)",
                "ran 2",
                {"receipts": [1, 2]},
            ),
            Result("G11", "lost commit never failed", Status.NOT_APPLICABLE, "", "sqlite"),
        ),
    )
    lines = report.to_text().splitlines()
    assert lines[1].split()[:5] == ["G1", "mutated", "approval", "refused", "PASS"]
    assert lines[1].endswith("a.b (rule[0]: approve) (ok)")
    assert lines[-1] == "1/2 applicable guarantees pass; 1 FAIL (G3); 1 not applicable (G11)"
    assert report.exit_code == 1
    junit = report.to_junit()
    assert 'failures="1"' in junit and 'skipped="1"' in junit and "<skipped" in junit
    assert '"exit_code": 1' in report.to_json()
