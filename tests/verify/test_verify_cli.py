"""``ctrlrun verify`` from the command line: the full run on the sample policy, outputs and
exit codes — and the operator's store is never opened, read or created."""

from __future__ import annotations

import json
import os
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner

from ctrlrun import SQLiteStateStore
from ctrlrun.cli import main
from support.policies import POLICY

EXPECTED_ACTIONS = {
    "G1": "k8s.namespace.delete (decision: approve)",
    "G2": "k8s.namespace.delete (decision: approve)",
    "G3": "billing.charge (decision: allow)",
    "G4": "billing.charge (decision: allow)",
    "G5": "billing.charge (decision: allow)",
    "G6": "billing.charge (decision: allow)",
    "G7": "billing.charge (decision: allow)",
    "G8": "billing.charge (decision: allow)",
    "G9": "billing.charge (decision: allow)",
    "G10": "billing.charge (decision: allow)",
    "G11": "",
    "G12": "billing.charge (decision: allow)",
}


def verify(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, ["verify", *args], env=env, catch_exceptions=False)


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.fixture
def operator_dir(tmp_path, monkeypatch):
    """A project directory: the policy, the operator's default store beside it (holding a
    receipt), and ``$CTRLRUN_STORE_URL`` naming a store that does not exist."""
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    (tmp_path / ".ctrlrun").mkdir()
    store = SQLiteStateStore(tmp_path / ".ctrlrun" / "state.db")
    store.record((), {"receipt_id": "rcp_operator", "action_id": "act_op", "result": "committed"})
    store.close()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTRLRUN_STORE_URL", f"sqlite://{tmp_path / 'elsewhere' / 'never.db'}")
    (tmp_path / "elsewhere").mkdir()
    return tmp_path


def test_the_full_run_passes_and_never_touches_the_operators_store(operator_dir):
    default_store = operator_dir / ".ctrlrun" / "state.db"
    before = {p: fingerprint(p) for p in (operator_dir / ".ctrlrun").iterdir()}
    junit = operator_dir / "verify.xml"
    result = verify("--json", "--junit", str(junit))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    rows = {g["id"]: (g["status"], g["action"]) for g in document["guarantees"]}
    assert {gid: action for gid, (_, action) in rows.items()} == EXPECTED_ACTIONS
    assert {gid: status for gid, (status, _) in rows.items()} == {
        **dict.fromkeys(EXPECTED_ACTIONS, "pass"),
        "G11": "n/a",
    }
    assert document["summary"] == "11/11 applicable guarantees pass; 1 not applicable (G11)"
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("12", "0", "1")
    assert {p: fingerprint(p) for p in (operator_dir / ".ctrlrun").iterdir()} == before
    assert fingerprint(default_store) == before[default_store]
    assert list((operator_dir / "elsewhere").iterdir()) == []


def test_a_missing_operator_store_is_not_created(tmp_path, monkeypatch):
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTRLRUN_STORE_URL", f"sqlite://{tmp_path / 'state.db'}")
    result = verify("--only", "G3,G9,G10")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctrlrun.yaml"]


def test_text_rows_progress_and_policy_from_the_environment(tmp_path, monkeypatch):
    policy = tmp_path / "elsewhere.yaml"
    policy.write_text(POLICY)
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))
    result = verify("--only", "G6,G11", "--progress")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[1].split()[:5] == ["G6", "unknown", "action", "denied", "PASS"]
    assert lines[2].split()[:6] == ["G11", "lost", "commit", "never", "failed", "N/A"]
    assert lines[-1] == "1/1 applicable guarantees pass; 1 not applicable (G11)"
    assert "G6  unknown action denied … PASS" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "G42"], "Error: no such guarantee: G42"),
        (["--store-url", "sqlite:///tmp/state.db"], "Error: --store-url takes a postgresql://"),
        (["--store-url", "mysql://x"], "Error: --store-url takes a postgresql://"),
        (["--policy", "/nonexistent/ctrlrun.yaml"], "Error: no policy file at"),
    ],
)
def test_refused_configurations_exit_2_with_one_line(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    result = verify(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message) and result.stderr.count("Error:") == 1


def test_a_malformed_policy_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: ctrlrun.policy/v1\nactions:\n  a.b:\n    decision: maybe\n")
    result = verify("--policy", str(bad))
    assert result.exit_code == 2 and "decision" in result.stderr


def test_nothing_applicable_exits_2(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("schema: ctrlrun.policy/v1\nactions: {}\n")
    result = verify("--policy", str(empty))
    assert result.exit_code == 2
    assert result.stdout.splitlines()[-1].endswith("nothing applicable, nothing proven")


def test_a_failed_guarantee_exits_1(tmp_path, monkeypatch):
    from support.mutations import apply_mutation

    apply_mutation("no-duplicate-guard", monkeypatch.setattr)
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    result = verify("--policy", str(tmp_path / "ctrlrun.yaml"), "--only", "G3", "--json")
    assert result.exit_code == 1
    (g3,) = json.loads(result.stdout)["guarantees"]
    assert g3["status"] == "fail" and g3["counterexample"]["receipts"]


def test_verifys_own_error_exits_3(tmp_path, monkeypatch):
    import ctrlrun.verify.runner as runner

    def broken(policy, **kwargs):
        raise KeyError("verify bug")

    monkeypatch.setattr(runner, "scratches_for", broken)
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    result = verify("--policy", str(tmp_path / "ctrlrun.yaml"))
    assert result.exit_code == 3 and result.stderr.startswith("Error: verify's own error")


def test_no_scratch_file_outlives_the_run(tmp_path, monkeypatch):
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch_root))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    result = verify("--policy", str(tmp_path / "ctrlrun.yaml"), "--only", "G3,G9")
    assert result.exit_code == 0
    assert os.listdir(scratch_root) == []
