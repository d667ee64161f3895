"""``ctrlrun receipts`` (listed, as JSON, verified) and ``ctrlrun inspect``."""

from __future__ import annotations

import json

import pytest

from support.cli import refused, run, tamper, usage


@pytest.fixture
def history(scene):
    """committed pay_1; a blocked duplicate of it; ambiguous pay_2; pay_3 waiting for a person."""
    scene.committed("pay_1")
    scene.refund("pay_1", 5_000)
    scene.ambiguous("pay_2")
    scene.pending("pay_3")
    return scene


def test_receipts_in_chain_order_with_aligned_columns(history):
    result = run("receipts")
    assert result.exit_code == 0 and result.stderr == ""
    header, *rows = result.stdout.splitlines()
    assert header.split() == [
        "SEQ",
        "FINISHED",
        "RESULT",
        "ACTION",
        "EFFECT",
        "KEY",
        "AGENT",
        "ACTION",
        "ID",
        "WHY",
    ]
    assert [row.split()[:5] for row in rows] == [
        ["1", rows[0].split()[1], "committed", "stripe.refund", "refund:pay_1"],
        ["2", rows[1].split()[1], "blocked", "stripe.refund", "refund:pay_1"],
        ["3", rows[2].split()[1], "ambiguous", "stripe.refund", "refund:pay_2"],
    ]
    assert "DuplicateEffect: effect 'refund:pay_1' already committed" in rows[1]
    assert {row.index(row.split()[2]) for row in rows} == {header.index("RESULT")}
    assert all("support-bot/alice" in row for row in rows)


def test_last_and_json(history):
    lines = run("receipts", "--last", "2", "--json").stdout.splitlines()
    documents = [json.loads(line) for line in lines]
    assert [d["seq"] for d in documents] == [2, 3]
    stored = history.store.receipts()[1]
    assert documents[0] == {**stored.document, "hash": stored.hash}
    assert len(run("receipts", "--last", "1").stdout.splitlines()) == 2  # header + one row
    usage(run("receipts", "--last", "0"), "--last")
    usage(run("receipts", "--last", "2", "--verify-chain"), "--verify-chain")


def test_no_receipts_yet(scene):
    assert run("receipts").stdout == "no receipts yet\n"
    assert run("receipts", "--json").stdout == ""


def test_an_intact_chain_verifies(history):
    result = run("receipts", "--verify-chain")
    assert result.exit_code == 0
    assert result.stdout == "chain: 3 of 3 receipts verified; head seq 3\n"
    [document] = map(json.loads, run("receipts", "--verify-chain", "--json").stdout.splitlines())
    assert document["ok"] is True and document["breaks"] == []
    assert document["head"] == {"seq": 3, "hash": history.store.receipts()[-1].hash}


def test_a_tampered_file_exits_1_naming_each_break_by_seq_and_kind(history):
    history.close()
    tamper(
        history.path,
        "UPDATE receipts SET document = replace(document, '5000', '500000') WHERE seq = 1",
        "UPDATE receipts SET hash = NULL WHERE seq = 3",
        # receipts are keyed by seq: a row smuggled in without one is numbered 4 by SQLite
        "INSERT INTO receipts (receipt_id, action_id, result, document, created_at)"
        " VALUES ('rcp_smuggled', 'act_x', 'committed', '{}', '2020-01-01')",
    )
    result = run("receipts", "--verify-chain")
    assert result.exit_code == 1
    assert result.stderr == "Error: the receipt chain has 4 break(s)\n"
    summary, *breaks = result.stdout.splitlines()
    assert summary == "chain: 1 of 4 receipts verified; head seq 3"
    assert [line.split()[:3] for line in breaks] == [
        ["seq", "1", "content_altered"],
        ["seq", "3", "hash_missing"],
        ["seq", "4", "hash_missing"],
        ["seq", "3", "head_mismatch"],
    ]
    assert breaks[0].split()[3] == history.store.receipts()[0].receipt_id
    as_json = run("receipts", "--verify-chain", "--json")
    assert as_json.exit_code == 1
    document = json.loads(as_json.stdout)
    assert document["ok"] is False
    assert [(b["kind"], b["seq"]) for b in document["breaks"]] == [
        ("content_altered", 1),
        ("hash_missing", 3),
        ("hash_missing", 4),
        ("head_mismatch", 3),
    ]


def test_a_deleted_receipt_is_missing_and_an_unreadable_row_is_shown_in_place(history):
    history.close()
    tamper(
        history.path,
        "DELETE FROM receipts WHERE seq = 2",
        "UPDATE receipts SET document = 'not json' WHERE seq = 3",
    )
    result = run("receipts", "--verify-chain")
    assert result.exit_code == 1
    kinds = [line.split()[:3] for line in result.stdout.splitlines()[1:]]
    assert kinds == [["seq", "2", "missing"], ["seq", "3", "content_altered"]]
    listing = run("receipts")
    assert listing.exit_code == 0
    assert listing.stdout.splitlines()[-1].split()[:3] == ["3", "-", "UNREADABLE"]
    last = json.loads(run("receipts", "--json").stdout.splitlines()[-1])
    assert last["seq"] == 3 and last["unreadable"].startswith("JSONDecodeError")


def test_a_missing_head_row_fails_verification(history):
    history.close()
    tamper(history.path, "DELETE FROM receipt_chain")
    result = run("receipts", "--verify-chain")
    assert result.exit_code == 1
    assert result.stdout == "chain: 3 of 3 receipts verified; head row missing\n"
    assert result.stderr == "Error: the receipt chain head row is missing; the store is damaged\n"


class TestInspect:
    def test_a_committed_action_from_proposal_to_receipt(self, history):
        committed, duplicate = (r["action_id"] for r in history.store.receipts()[:2])
        action_id = committed
        result = run("inspect", action_id)
        assert result.exit_code == 0
        block, timeline = result.stdout.split("\n\nevents\n")
        fields = dict(line.split(None, 1) for line in block.splitlines())
        assert fields["action"] == action_id and fields["name"] == "stripe.refund"
        assert fields["principal"] == "support-bot/alice"
        assert fields["arguments"] == '{"amount": 5000, "payment_id": "pay_1"}'
        assert fields["decision"].startswith("allow (rule[0]) under policy sha256:")
        assert fields["effect"] == "refund:pay_1  committed  attempt 1"
        assert fields["receipt"].startswith("seq 1  committed  rcp_")
        types = [line.split()[2] for line in timeline.splitlines()]
        assert types == [
            "ACTION_PROPOSED",
            "POLICY_EVALUATED",
            "EFFECT_RESERVED",
            "EXECUTION_STARTED",
            "EXECUTION_COMMITTED",
        ]
        out = run("inspect", duplicate).stdout
        assert f"refund:pay_1  committed  attempt 1  (by {committed}, not this action)" in out
        assert "EFFECT_RESERVATION_REFUSED" in out

    def test_an_action_waiting_for_a_person_is_inspected_from_its_events(self, history):
        approval_id = history.store.list_approvals()[0].approval_id
        action_id = history.store.get_approval(approval_id).action["action_id"]
        for subject in (action_id, approval_id):  # an approval id stands for its action
            out = run("inspect", subject).stdout
            assert f"action       {action_id}" in out
            assert '{"amount": 200000, "payment_id": "pay_3"}' in out
            assert f"approval     {approval_id}  pending" in out
            assert f"awaiting a human (`ctrlrun approve {approval_id}`)" in out

    def test_approval_answers_without_an_action_id_are_in_the_timeline(self, history):
        approval_id = history.store.list_approvals()[0].approval_id
        run("approve", approval_id)
        assert history.refund("pay_3", 200_000, approval=approval_id) == {"refund": "re_3"}
        spender = history.receipt_for("refund:pay_3")["action_id"]
        document = json.loads(run("inspect", spender, "--json").stdout)
        types = [e["type"] for e in document["events"]]
        assert types[:2] == ["APPROVAL_REQUESTED", "APPROVAL_GRANTED"]
        assert "APPROVAL_CONSUMED" in types and types[-1] == "EXECUTION_COMMITTED"
        granted = document["events"][1]
        assert granted["action_id"] is None and granted["approval_id"] == approval_id
        assert [a["status"] for a in document["approvals"]] == ["consumed"]

    def test_json_has_every_part(self, history):
        action_id = history.receipt_for("refund:pay_2")["action_id"]
        document = json.loads(run("inspect", action_id, "--json").stdout)
        assert set(document) == {
            "schema",
            "action_id",
            "action",
            "action_hash",
            "decision",
            "approvals",
            "effect_key",
            "effect",
            "effect_template",
            "receipts",
            "events",
        }
        assert document["schema"] == "ctrlrun.inspection/v1"
        assert document["effect_template"]["template"] == "refund:{payment_id}"
        assert document["effect_template"]["accepted_by"] is None
        assert document["effect"]["state"] == "ambiguous"
        assert document["receipts"][0]["result"] == "ambiguous"
        assert document["decision"]["decision"] == "allow"

    def test_a_mutated_approval_names_the_approval_it_presented(self, scene):
        approval_id = scene.pending("pay_3", 200_000)
        run("approve", approval_id)
        scene.refund("pay_3", 500_000, approval=approval_id)
        mutated = scene.receipt_for("refund:pay_3")["action_id"]
        out = run("inspect", mutated).stdout
        assert f"approval     {approval_id}  granted by cli:local" in out
        assert "APPROVAL_INVALIDATED" in out and "reason=mismatch" in out

    def test_an_action_in_flight_is_read_from_its_proposal(self, scene):
        seen = []

        def inspect_mid_flight():
            [proposed] = [e for e in scene.store.events() if e.type == "ACTION_PROPOSED"]
            seen.append(run("inspect", proposed.action_id).stdout)

        scene.during.append(inspect_mid_flight)
        scene.refund("pay_9", 7_000)
        fields = dict(line.split(None, 1) for line in seen[0].split("\n\n")[0].splitlines())
        assert fields["arguments"] == '{"amount": 7000, "payment_id": "pay_9"}'
        assert fields["principal"] == "support-bot/alice"
        assert fields["effect"] == "refund:pay_9  executing  attempt 1"
        assert fields["receipt"] == "none yet: in flight (effect executing)"

    def test_an_unknown_id_prints_nothing_and_exits_1(self, history):
        refused(run("inspect", "act_nobody"), "no action act_nobody")
        refused(run("inspect", "apr_nobody", "--json"), "apr_nobody")


class TestInspectWithoutEvents:
    """Events can be missing (an older store, a pruned log): the receipt, or the approval
    request, still says what the action was."""

    def test_the_action_and_decision_come_from_the_receipt(self, history):
        action_id = history.receipt_for("refund:pay_2")["action_id"]
        history.close()
        tamper(history.path, f"DELETE FROM events WHERE action_id = '{action_id}'")
        fields = dict(
            line.split(None, 1) for line in run("inspect", action_id).stdout.splitlines()[:11]
        )
        assert fields["arguments"] == '{"amount": 5000, "payment_id": "pay_2"}'
        assert fields["decision"].startswith("allow (rule[0])")
        assert fields["effect"] == "refund:pay_2  ambiguous  attempt 1"

    def test_the_action_comes_from_the_approval_request(self, history):
        approval = history.store.list_approvals()[0]
        history.close()
        tamper(history.path, "DELETE FROM events")
        out = run("inspect", approval.approval_id).stdout
        assert '{"amount": 200000, "payment_id": "pay_3"}' in out
        assert "decision     -" in out

    def test_a_reservation_without_a_proposal(self, scene):
        scene.executing("refund:bare", lapsed=True)
        out = run("inspect", "act_crashed_refund:bare").stdout
        assert "name         -" in out
        assert "effect       refund:bare  executing (lease expired)  attempt 1" in out
        assert "receipt      none: its lease lapsed without an outcome" in out
