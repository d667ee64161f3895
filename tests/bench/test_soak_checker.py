"""The soak's history checker must be able to fail: each violation it names is detected, on
SQLite and on Postgres (a real server: the checker reads the store the soak ran against)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import ctrlrun
from ctrlrun.config import load_policy_text

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak"
sys.path.insert(0, str(SOAK))

from checker import check  # noqa: E402
from journal import Journal  # noqa: E402

POLICY = "schema: ctrlrun.policy/v1\nactions:\n  soak.transfer:\n    decision: allow\n"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(request, backend, tmp_path):
    if backend == "sqlite":
        opened = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    else:
        from ctrlrun.postgres import PostgresStateStore

        pg_schema = request.getfixturevalue("pg_schema")
        opened = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    yield opened
    opened.close()


@pytest.fixture
def tamper(request, backend, tmp_path):
    """``tamper(sql)``: run one statement straight against the store's database."""

    def run(statement: str) -> None:
        if backend == "sqlite":
            with sqlite3.connect(tmp_path / "state.db") as conn:
                conn.execute(statement)
        else:
            with request.getfixturevalue("pg_schema").connect() as conn:
                conn.execute(statement)

    return run


@pytest.fixture
def world(tmp_path, store):
    control = ctrlrun.Control(load_policy_text(POLICY), store)
    journal = Journal(tmp_path / "journal-1.jsonl")
    return tmp_path, store, control, journal


def new_action(key):
    return ctrlrun.Action("soak.transfer", {"key": key}, ctrlrun.Principal("w"))


def call(control, journal, key, executor, action=None):
    action = action or new_action(key)
    try:
        control.execute(action, executor, effect_key=key)
        outcome = "returned"
    except BaseException as exc:
        outcome = f"raised:{type(exc).__name__}"
    journal.write(phase="outcome", action_id=action.action_id, key=key, fault="x", outcome=outcome)
    return action


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


def test_a_journalled_cut_explains_an_ambiguous_and_only_its_own_action(world):
    directory, store, control, journal = world
    ours = new_action("k1")
    journal.write(phase="cut", cut="finish_before", action_id=ours.action_id, key="k1")
    call(control, journal, "k1", acting(journal, "ok", raise_=RuntimeError("lost")), ours)
    journal.write(phase="cut", cut="finish_after", action_id="act_someone_else", key="k2")
    call(control, journal, "k2", acting(journal, "ok", raise_=RuntimeError("lost")))
    findings = check(directory, store)
    assert findings.counts["ambiguous_explained_by:cut_finish_before"] == 1
    assert findings.violations["unexplained_ambiguous"] == ["k2 attempt 1: ok"]


def test_a_second_receipt_for_one_action_is_found(world):
    directory, store, control, journal = world
    action = call(control, journal, "k1", acting(journal))
    call(control, journal, "k1", acting(journal), action)  # refused, and receipted again
    found = check(directory, store).violations["duplicate_receipts"]
    assert found == [f"{action.action_id}: 2 receipts"]


def test_a_missing_receipt_and_a_broken_chain_are_found(world, tamper):
    directory, store, control, journal = world
    call(control, journal, "k1", acting(journal))
    journal.write(phase="outcome", action_id="act_ghost", key="k9", fault="ok", outcome="returned")
    tamper("UPDATE receipts SET document = replace(document, 'k1', 'kX')")
    findings = check(directory, store)
    assert findings.violations["missing_receipts"] == ["act_ghost"]
    (receipt,) = store.receipts()
    place = f"{receipt.partition}:1" if receipt.partition else "1"  # one chain of several
    assert findings.violations["chain_breaks"] == [f"content_altered@{place}"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_short_real_soak_is_clean(request, backend, tmp_path):
    env = dict(os.environ)
    if backend == "postgres":  # the session's server; the soak makes its own database on it
        env["CTRLRUN_TEST_POSTGRES_URL"] = request.getfixturevalue("pg_server").superuser_url
    argv = ["--duration", "4", "--workers", "3", "--backend", backend, "--keep", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "soak.py", *argv],
        check=False,
        cwd=SOAK,
        capture_output=True,
        text=True,
        timeout=170,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "result: OK" in done.stdout and "journal:acting" in done.stdout
    if backend == "postgres":
        assert "cut_fired:" in done.stdout  # the proxy really cut connections
