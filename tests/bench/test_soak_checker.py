"""The soak's history checker must be able to fail: each violation it names is detected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ctrlrun

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak"
sys.path.insert(0, str(SOAK))

from checker import check  # noqa: E402
from journal import Journal  # noqa: E402

POLICY = "schema: ctrlrun.policy/v1\nactions:\n  soak.transfer:\n    decision: allow\n"


@pytest.fixture
def world(tmp_path):
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    control = ctrlrun.Control(ctrlrun.Policy.from_yaml(POLICY), store)
    journal = Journal(tmp_path / "journal-1.jsonl")
    return tmp_path, store, control, journal


def call(control, journal, key, executor):
    action = ctrlrun.Action("soak.transfer", {"key": key}, ctrlrun.Principal("w"))
    try:
        control.execute(action, executor, effect_key=key)
        outcome = "returned"
    except BaseException as exc:
        outcome = f"raised:{type(exc).__name__}"
    journal.write(phase="outcome", action_id=action.action_id, key=key, fault="x", outcome=outcome)


def acting(journal, fault="ok", **extra):
    def executor(key):
        token = ctrlrun.idempotency_token()
        journal.write(phase="start", token=token, key=key, fault=fault)
        journal.write(phase="acting", token=token, key=key, fault=fault)
        if "raise_" in extra:
            raise extra["raise_"]
        return "ok"

    return executor


def test_a_clean_history_passes(world):
    directory, store, control, journal = world
    call(control, journal, "k1", acting(journal))
    call(control, journal, "k2", acting(journal, "error", raise_=RuntimeError("lost")))
    findings = check(directory, store)
    assert findings.ok, findings.violations
    assert findings.counts["ambiguous_explained_by:error"] == 1


def test_a_double_execution_is_found(world):
    directory, store, control, journal = world
    call(control, journal, "k1", acting(journal))
    journal.write(phase="acting", token="another-token", key="k1", fault="ok")
    assert check(directory, store).violations["double_executions"] == ["k1: 2 actions"]


def test_failed_after_acting_is_found(world):
    directory, store, control, journal = world
    call(control, journal, "k1", acting(journal, raise_=ctrlrun.NotExecuted("a lie")))
    found = check(directory, store).violations["failed_but_acted"]
    assert "k1 attempt 1: receipt" in found and "k1 attempt 1: record" in found


def test_an_unexplained_ambiguous_is_found(world):
    directory, store, control, journal = world
    call(control, journal, "k1", acting(journal, "ok", raise_=RuntimeError("no fault dealt")))
    assert check(directory, store).violations["unexplained_ambiguous"] == ["k1 attempt 1: ok"]


def test_a_missing_receipt_and_a_broken_chain_are_found(world):
    directory, store, control, journal = world
    call(control, journal, "k1", acting(journal))
    journal.write(phase="outcome", action_id="act_ghost", key="k9", fault="ok", outcome="returned")
    import sqlite3

    with sqlite3.connect(directory / "state.db") as conn:
        conn.execute("UPDATE receipts SET document = replace(document, 'k1', 'kX')")
    findings = check(directory, store)
    assert findings.violations["missing_receipts"] == ["act_ghost"]
    assert findings.violations["chain_breaks"] == ["content_altered@1"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_short_real_soak_is_clean(tmp_path):
    done = subprocess.run(
        [sys.executable, "soak.py", "--duration", "4", "--workers", "3", "--keep", str(tmp_path)],
        check=False,
        cwd=SOAK,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "result: OK" in done.stdout and "journal:acting" in done.stdout
