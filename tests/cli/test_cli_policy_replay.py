"""``ctrlrun policy replay CANDIDATE``: the recorded calls re-decided under a candidate policy.

Real protected calls write the history (SQLite file and a Postgres schema); the replay reports,
per action and rule, what would now be denied, need a person or run, which calls would reserve
another effect key or meet the remembered template; it writes nothing, honours ``--since`` and
streams the receipts a page at a time."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from ctrlrun.cli.replay import replay_policy
from ctrlrun.config import load_policy_text
from ctrlrun.store import history
from support.cli import Scene, refused, run
from support.policies import POLICY

STRICTER = POLICY.replace("amount_lte: 100000}", "amount_lte: 1000}").replace(
    "crm.read:\n    decision: allow", "crm.read:\n    decision: deny"
)
REKEYED = POLICY.replace(
    'effect: "refund:{payment_id}"', 'effect: "refund:{payment_id}:{amount:int}"'
)


def _fill(scene: Scene) -> None:
    """pay_1 and pay_2 committed (5,000 each: rule[0]), a blocked duplicate of pay_1, an
    ambiguous pay_3; all under rule[0] of today's policy."""
    scene.committed("pay_1")
    scene.committed("pay_2")
    scene.refund("pay_1", 5_000)
    scene.ambiguous("pay_3")


def _candidate(root: Path, text: str) -> str:
    path = root / "candidate.yaml"
    path.write_text(text)
    return str(path)


def _groups(output: str) -> tuple[list[dict], dict]:
    lines = [json.loads(line) for line in output.splitlines()]
    return lines[:-1], lines[-1]["totals"]


@pytest.fixture
def filled(any_scene):
    _fill(any_scene)
    return any_scene


def test_a_stricter_candidate_names_what_would_now_need_a_person(filled, project):
    before = [r.text for r in filled.store.receipts()]
    result = run("policy", "replay", _candidate(project, STRICTER), "--json",
                 "--store-url", filled.url)  # fmt: skip
    assert result.exit_code == 0, result.output
    groups, totals = _groups(result.stdout)
    [changed] = groups
    assert changed["action"] == "stripe.refund"
    assert (changed["old_rule"], changed["new_rule"]) == ("rule[0]", "rule[1]")
    assert changed["change"] == "now_needs_person" and changed["calls"] == 4
    assert len(changed["examples"]) == 3
    assert totals["calls"] == 4 and totals["now_needs_person"] == 4 and totals["unchanged"] == 0
    assert [r.text for r in filled.store.receipts()] == before  # read-only


def test_a_rekeyed_candidate_names_the_changed_keys_and_the_template_refusal(filled, project):
    result = run("policy", "replay", _candidate(project, REKEYED), "--json",
                 "--store-url", filled.url)  # fmt: skip
    groups, totals = _groups(result.stdout)
    [group] = groups
    assert group["change"] == "unchanged"
    assert group["keys_changed"] == 4 and group["template_refused"] == 4
    assert totals["keys_changed"] == 4 and totals["template_refused"] == 4


def test_the_text_report_says_the_totals_and_hides_unchanged_groups(filled, project):
    same = run("policy", "replay", _candidate(project, POLICY), "--store-url", filled.url)
    assert same.exit_code == 0, same.output
    assert same.stdout.startswith("4 calls replayed: 4 same, 0 now denied")
    stricter = run("policy", "replay", _candidate(project, STRICTER), "--store-url", filled.url)
    header, row, _blank, summary = stricter.stdout.splitlines()
    assert header.split()[:4] == ["ACTION", "WAS", "WOULD", "BE"]
    assert "now NEEDS A PERSON" in row and row.split()[0] == "stripe.refund"
    assert "4 now need a person" in summary


def test_since_limits_the_replay_to_what_was_recorded_then(project):
    (project / ".ctrlrun").mkdir()
    scene = Scene(project)
    try:
        scene.committed("pay_old")
        scene.clock.advance(timedelta(days=10))
        scene.committed("pay_new")
        since = (scene.clock() - timedelta(days=1)).date().isoformat()
        result = run("policy", "replay", _candidate(project, STRICTER), "--json", "--since", since)
        assert _groups(result.stdout)[1]["calls"] == 1
        whole = run("policy", "replay", _candidate(project, STRICTER), "--json")
        assert _groups(whole.stdout)[1]["calls"] == 2
    finally:
        scene.close()


def test_receipts_are_read_a_page_at_a_time(scene, monkeypatch):
    for n in range(7):
        scene.committed(f"pay_{n}")
    pages: list[int] = []
    real = history._page

    def counted(txn, **kwargs):
        rows = real(txn, **kwargs)
        pages.append(len(rows))
        return rows

    monkeypatch.setattr(history, "_page", counted)
    documents = list(history.receipt_documents(scene.store, page=3))
    assert [d["seq"] for d in documents] == list(range(1, 8)) and pages == [3, 3, 1]
    assert replay_policy(scene.store, load_policy_text(STRICTER)).calls == 7


def test_refusals_are_one_line(scene, project):
    refused(run("policy", "replay", str(project / "missing.yaml")), "missing.yaml")
    bad = project / "bad.yaml"
    bad.write_text("schema: ctrlrun.policy/v1\nactions: {x: {decision: maybe}}\n")
    refused(run("policy", "replay", str(bad)))
    refused(
        run("policy", "replay", str(bad.with_name("ctrlrun.yaml")), "--since", "soon"), "--since"
    )
