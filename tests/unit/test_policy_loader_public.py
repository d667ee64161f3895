"""The policy loader is public from the top package again (issue 27, decision 0027):
``ctrlrun.load_policy`` and ``ctrlrun.Policy.from_yaml``/``from_file`` build a ``Control``
without importing a config module, while ``import ctrlrun`` still loads no YAML parser and the
kernel names no module above it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ctrlrun
from ctrlrun.config import load_policy_text
from support.policies import POLICY


def run_probe(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_load_policy_reads_a_file_and_builds_a_control(tmp_path):
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(POLICY)
    policy = ctrlrun.load_policy(path)
    assert policy == load_policy_text(POLICY)
    assert policy.source == str(path)
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    control = ctrlrun.Control(policy, store)
    assert control.policy.policy_hash == policy.policy_hash
    store.close()


def test_load_policy_without_a_path_reads_ctrlrun_config(tmp_path, monkeypatch):
    (tmp_path / "elsewhere.yaml").write_text(POLICY)
    monkeypatch.setenv("CTRLRUN_CONFIG", str(tmp_path / "elsewhere.yaml"))
    assert ctrlrun.load_policy().source == str(tmp_path / "elsewhere.yaml")


def test_policy_from_yaml_and_from_file_delegate_to_the_strict_loader(tmp_path):
    assert ctrlrun.Policy.from_yaml(POLICY) == load_policy_text(POLICY)
    (tmp_path / "p.yaml").write_text(POLICY)
    assert ctrlrun.Policy.from_file(tmp_path / "p.yaml") == load_policy_text(POLICY)
    with pytest.raises(ctrlrun.PolicyError) as refused:
        ctrlrun.Policy.from_yaml("schema: ctrlrun.policy/v1\nactions: {}\nbogus: 1\n", source="x")
    assert refused.value.key == "bogus" and refused.value.line == 3
    with pytest.raises(ctrlrun.PolicyError, match="no policy file here"):
        ctrlrun.load_policy(tmp_path / "missing.yaml")


def test_import_ctrlrun_still_loads_no_yaml_and_the_first_read_does():
    probe = (
        "import sys, ctrlrun\n"
        "before = 'yaml' in sys.modules\n"
        "ctrlrun.Policy.from_yaml('schema: ctrlrun.policy/v1\\nactions: {}\\n')\n"
        "print(before, 'yaml' in sys.modules)"
    )
    assert run_probe(probe) == "False True"
