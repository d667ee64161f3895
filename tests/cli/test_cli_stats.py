"""``ctrlrun stats``: what the agents did in a window, counted from the store's rollup.

Real protected calls write the history on a SQLite file and a Postgres schema; people answer
and settle through the store with a manual clock, so every figure (calls by result and
decision, reasons, approvals and how long people took, AMBIGUOUS opened, resolved and how long
they stayed open) is asserted exactly. The rollup is folded once per receipt, also by
concurrent refreshers (real processes behind a barrier), and read-only reading writes nothing."""

from __future__ import annotations

import json
import multiprocessing
from datetime import timedelta

import pytest

from ctrlrun.kernel.effect import EffectState
from ctrlrun.store import open_store
from ctrlrun.store.stats import gather_stats, refresh_stats
from support.cli import Scene, refused, run


def _history(scene: Scene) -> None:
    """Two committed refunds, a blocked duplicate, a denied one, an AMBIGUOUS one resolved
    FAILED 30 minutes later, and a request granted 5 minutes after it was made, then run."""
    scene.committed("pay_1")
    scene.committed("pay_2")
    scene.refund("pay_1", 5_000)
    scene.refund("pay_big", 50_000_000)
    scene.ambiguous("pay_3")
    scene.clock.advance(timedelta(minutes=30))
    scene.store.resolve_effect("refund:pay_3", EffectState.FAILED, "cli:alice")
    request = scene.pending("pay_4")
    scene.clock.advance(timedelta(minutes=5))
    scene.control.approvals.grant(request, "human:bob")
    assert scene.refund("pay_4", 200_000, approval=request) == {"refund": "re_4"}


@pytest.fixture
def history(any_scene):
    _history(any_scene)
    return any_scene


def _stats(scene: Scene, *args: str) -> dict:
    result = run("stats", "--json", "--store-url", scene.url, *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_figure_of_a_known_history(history):
    report = _stats(history)
    assert report["calls"] == 6
    [refunds] = report["groups"]
    assert refunds["name"] == "stripe.refund"
    assert refunds["results"] == {"ambiguous": 1, "blocked": 1, "committed": 3, "denied": 1}
    assert refunds["decisions"] == {"allow": 4, "approve": 1, "deny": 1}
    assert refunds["reasons"] == {
        "ActionDenied": 1, "DuplicateEffect": 1, "TimeoutError": 1,
    }  # fmt: skip
    assert report["approvals"] == {"consumed": 1}
    assert report["approval_answer_seconds"] == {"count": 1, "median": 300.0, "p90": 300.0}
    assert report["ambiguous"] == {
        "opened": 1, "resolved": {"failed": 1}, "open_now": 0,
        "open_seconds": {"count": 1, "median": 1800.0, "p90": 1800.0},
    }  # fmt: skip


def test_by_agent_and_by_rule(history):
    [agent] = _stats(history, "--by", "agent")["groups"]
    assert (agent["name"], agent["calls"]) == ("support-bot", 6)
    rules = {g["name"]: g["calls"] for g in _stats(history, "--by", "rule")["groups"]}
    assert rules == {"rule[0]": 4, "rule[1]": 1, "rule[2]": 1}


def test_the_rollup_counts_each_receipt_once(history):
    first = _stats(history)
    assert _stats(history) == first  # refreshed again: nothing folded twice
    history.committed("pay_5")
    assert _stats(history)["calls"] == 7
    assert refresh_stats(history.store) == 0


def test_no_refresh_counts_the_tail_in_memory_and_writes_nothing(history):
    before = gather_stats(history.store, None)
    assert before.counts and sum(n for _, n in before.counts) == 6
    refreshed = _stats(history, "--no-refresh")
    assert refreshed["calls"] == 6
    assert refresh_stats(history.store) == 6  # the read-only run folded nothing


def test_since_reads_only_the_window(project):
    (project / ".ctrlrun").mkdir()
    scene = Scene(project)
    try:
        scene.committed("pay_old")
        scene.clock.advance(timedelta(days=10))
        scene.committed("pay_new")
        since = (scene.clock() - timedelta(days=1)).date().isoformat()
        assert _stats(scene, "--since", since)["calls"] == 1
        assert _stats(scene)["calls"] == 2
    finally:
        scene.close()


def test_the_text_report(history):
    result = run("stats", "--store-url", history.url)
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["ACTION", "CALLS", "COMMITTED"]
    assert lines[1].split()[:7] == ["stripe.refund", "6", "3", "0", "1", "1", "1"]
    assert "approvals    1 requested: consumed 1" in lines
    assert "ambiguous    1 opened, failed 1, 0 open now" in lines
    assert "open for     median 30m, p90 30m (1)" in lines


def test_an_empty_store_and_bad_input(scene):
    assert run("stats").stdout.startswith("nothing recorded in this window")
    refused(run("stats", "--since", "last tuesday"), "--since")
    assert run("stats", "--by", "mood").exit_code == 2


def _refresher(url: str, barrier, out) -> None:
    store = open_store(url, existing=True)
    try:
        barrier.wait(timeout=60)
        out.put(refresh_stats(store, page=7))
    finally:
        store.close()


def test_concurrent_refreshers_fold_each_receipt_once(any_scene):
    scene = any_scene
    for n in range(60):
        scene.committed(f"pay_{n}")
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    workers = [ctx.Process(target=_refresher, args=(scene.url, barrier, out)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    assert sum(out.get(timeout=10) for _ in workers) == 60
    window = gather_stats(scene.store, None)
    assert sum(n for _, n in window.counts) == 60


def test_a_protected_call_never_writes_the_rollup(scene):
    scene.committed("pay_1")
    assert refresh_stats(scene.store) == 1
    scene.committed("pay_2")
    since = scene.clock() - timedelta(days=1)
    params = {"dimension": "action"}
    rows = scene.store.read(lambda txn: txn.all("stats_counts", {**params, "since": txn.ts(since)}))
    assert sum(int(r["calls"]) for r in rows) == 1  # the second call left the rollup alone
