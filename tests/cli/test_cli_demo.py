"""``ctrlrun demo``: every scenario refused (or passed) for real, and a broken library caught."""

from __future__ import annotations

import re
import time

import pytest

from ctrlrun import EffectState, SQLiteStateStore
from ctrlrun.kernel.approval import ApprovalPlan
from support.cli import refused, run

IDS = re.compile(r"\b(apr|act|rcp)_[0-9a-f]{32}\b")


def demo_store(empty):
    return empty / ".ctrlrun" / "demo" / "state.db"


def test_the_five_scenarios_are_refused_for_real(empty):
    result = run("demo")
    assert result.exit_code == 0 and result.stderr == ""
    out = result.stdout
    blocked = [line.split(None, 1)[1] for line in out.splitlines() if "BLOCKED" in line]
    assert blocked == [
        "the refund may already have happened (ambiguous)",
        "approved ≠ requested (mismatch); the approval is left unused",
        "agent-b: already in progress (in_progress)",
        "single use: the approval is already consumed",
    ]
    assert "   ok       attempt 2 committed" in out
    calls = [line.strip() for line in out.splitlines() if "remote calls" in line]
    assert calls == [f"remote calls: {n}" for n in (1, 0, 1, 1, 1)]
    assert "ctrlrun resolve refund:pay_1001 --committed" in out
    assert "All five held: 9 receipts, hash chain verified." in out


def test_the_evidence_matches_what_was_printed(empty):
    run("demo")
    store = SQLiteStateStore.open_existing(demo_store(empty))
    try:
        results = [
            (r["effect_key"], r["result"], r["principal"]["agent"]) for r in store.receipts()
        ]
        assert results == [
            ("refund:pay_1001", "ambiguous", "support-bot"),
            ("refund:pay_1001", "blocked", "support-bot"),
            ("refund:pay_2002", "blocked", "support-bot"),
            ("refund:pay_3003", "blocked", "agent-b"),
            ("refund:pay_3003", "committed", "agent-a"),
            ("refund:pay_4004", "committed", "support-bot"),
            ("refund:pay_4004", "blocked", "support-bot"),
            ("refund:pay_5005", "failed", "support-bot"),
            ("refund:pay_5005", "committed", "support-bot"),
        ]
        states = {r.effect_key: (r.state, r.attempt) for r in store.list_effects()}
        assert states == {
            "refund:pay_1001": (EffectState.AMBIGUOUS, 1),
            "refund:pay_3003": (EffectState.COMMITTED, 1),
            "refund:pay_4004": (EffectState.COMMITTED, 1),
            "refund:pay_5005": (EffectState.COMMITTED, 2),
        }
        finished = [r["finished_at"][11:16] for r in store.receipts()]
        assert finished == ["09:01"] * 2 + ["09:02"] + ["09:03"] * 2 + ["09:04"] * 2 + ["09:05"] * 2
        assert store.verify_chain().ok
    finally:
        store.close()


def test_the_printed_commands_read_the_demo_store(empty):
    out = run("demo").stdout
    url = re.search(r"--store-url (\S+)", out).group(1)
    assert url == f"sqlite://{demo_store(empty)}"
    assert run("receipts", "--store-url", url, "--verify-chain").exit_code == 0
    assert "ambiguous" in run("effects", "--store-url", url).stdout
    resolved = run("resolve", "refund:pay_1001", "--failed", "--store-url", url)
    assert resolved.stdout.startswith("refund:pay_1001 resolved failed by cli:local")


def test_deterministic_apart_from_ids_and_only_its_own_files_are_replaced(empty):
    first = run("demo").stdout
    mine = empty / ".ctrlrun" / "demo" / "notes.txt"
    mine.write_text("keep me")
    operator = empty / ".ctrlrun" / "state.db"
    operator.write_bytes(b"the operator's store")
    second = run("demo").stdout
    assert IDS.sub("<id>", first) == IDS.sub("<id>", second)
    assert mine.read_text() == "keep me" and operator.read_bytes() == b"the operator's store"
    assert sorted(p.name for p in (empty / ".ctrlrun" / "demo").iterdir()) == [
        "notes.txt",
        *sorted(p.name for p in demo_store(empty).parent.glob("state.db*")),
    ]
    assert {p.relative_to(empty).parts[:2] for p in empty.rglob("*") if p.is_file()} == {
        (".ctrlrun", "demo"),
        (".ctrlrun", "state.db"),
    }


def test_the_operators_store_url_is_ignored(empty, monkeypatch):
    theirs = empty / "theirs.db"
    SQLiteStateStore(theirs).close()
    before = theirs.read_bytes()
    monkeypatch.setenv("CTRLRUN_STORE_URL", f"sqlite://{theirs}")
    assert run("demo").exit_code == 0
    assert theirs.read_bytes() == before


def test_the_scenarios_run_well_under_a_second(empty):
    started = time.perf_counter()
    assert run("demo").exit_code == 0
    assert time.perf_counter() - started < 1.0


def _approve_anything(*_args, **_kwargs):
    return ApprovalPlan()  # every presented approval authorises anything, any number of times


def _never_live(self, now):
    return False  # every reservation looks abandoned: a second agent is never "in progress"


@pytest.mark.parametrize(
    ("target", "replacement", "scenario"),
    [
        ("ctrlrun.store.ops.approvals.plan_consume", _approve_anything, "scenario 2"),
        ("ctrlrun.kernel.effect.EffectRecord.lease_is_live", _never_live, "scenario 3"),
    ],
)
def test_a_library_that_lets_a_scenario_through_fails_the_demo(
    empty, monkeypatch, target, replacement, scenario
):
    monkeypatch.setattr(target, replacement)
    result = run("demo")
    line = refused_after_output(result)
    assert scenario in line and "ctrlrun is broken here" in line
    assert "All five held" not in result.stdout


def refused_after_output(result):
    """Exit 1 and one ``Error:`` line; unlike a plain refusal, the scenarios so far printed."""
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    return lines[0]


def test_a_demo_that_cannot_write_its_store_is_refused(empty):
    (empty / ".ctrlrun").write_text("a file where the demo wants a directory")
    refused(run("demo"))
