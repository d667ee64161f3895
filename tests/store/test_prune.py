"""Retention that keeps proof, on both stores (issue 28, docs/checkpoints.md): ``prune`` removes
the receipts a checkpoint covers and their events, the rest of the chain verifies from that
checkpoint, and nothing an operator still acts on is removed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ctrlrun.checkpoints import checkpoint_heads, load_checkpoints, make_checkpoint, prune
from ctrlrun.errors import ChainRefusal, ChainRefused
from ctrlrun.kernel.approval import ApprovalRequestDraft, ApprovalStatus
from ctrlrun.kernel.budget import Budget
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.receipt import ChainHead
from ctrlrun.kernel.signing import generate
from ctrlrun.store.budgets import budget_spend, consume_budget
from support.store_calls import finish, start

OPERATOR_PEM, OPERATOR_KEY = generate()
HASH = "sha256:" + "ab" * 32
SECOND = timedelta(seconds=1)


def receipt(index: int) -> dict[str, object]:
    return {"receipt_id": f"rcp_{index}", "action_id": f"act_{index}", "result": "denied"}


@pytest.fixture
def history(backend, clock, tmp_path):
    """Receipts 1..5 (a committed effect, an AMBIGUOUS one, an action whose approval is still
    pending, two denials), a checkpoint at seq 5, then receipts 6..7 and another checkpoint."""
    store = backend.open(clock)
    start(store, "act_1", "k:done")
    finish(store, "act_1", "k:done")  # receipt 1, effect COMMITTED
    start(store, "act_2", "k:unsure")
    finish(store, "act_2", "k:unsure", outcome=EffectState.AMBIGUOUS, error="timeout")  # 2
    draft = ApprovalRequestDraft("apr_open", {"action_id": "act_3"}, HASH, "sha256:p", 9 * SECOND)
    store.put_approval_request(draft)
    asked = EventDraft(EventType.APPROVAL_REQUESTED, "act_3", approval_id="apr_open")
    store.record((asked,), receipt(3))  # receipt 3: the action waits for its approval
    for index in (4, 5):
        denied = EventDraft(EventType.ACTION_DENIED, f"act_{index}")
        store.record((denied,), receipt(index))
    clock.advance(SECOND)
    file = tmp_path / "checkpoints"
    first = make_checkpoint(store, OPERATOR_PEM, file=file, now=clock())
    clock.advance(SECOND)
    for index in (6, 7):
        store.record((EventDraft(EventType.ACTION_DENIED, f"act_{index}"),), receipt(index))
    clock.advance(SECOND)
    make_checkpoint(store, OPERATOR_PEM, file=file, now=clock())
    clock.advance(SECOND)
    return store, file, first


def proven(file):
    return load_checkpoints(file, OPERATOR_KEY)


def test_prune_removes_what_the_checkpoint_covers_and_the_rest_verifies_from_it(history):
    store, file, first = history
    head = store.chain_head()
    done = prune(store, first.time + SECOND, proven(file))  # the second checkpoint is later
    assert (done.anchor, done.receipts) == (first.heads[0].head, 5)
    assert [r.seq for r in store.receipts()] == [6, 7]
    assert store.chain_anchor() == ChainHead(5, first.heads[0].hash)
    for checkpoints in (None, checkpoint_heads(proven(file))):
        report = store.verify_chain(checkpoints=checkpoints)
        assert report.ok and report.anchor.seq == 5 and report.head == head
    # `ctrlrun stats` still counts what was pruned: its rollup was brought up to date first
    assert store.read(lambda txn: txn.one("stats_mark_get", {}))["seq"] == head.seq
    # the store keeps the signed statement it anchored at, for an auditor without the file
    assert store.read(lambda txn: txn.all("anchor_list", {}))[0]["statement"] == first.statement


def test_prune_keeps_current_state_open_approvals_and_unsettled_effects(history):
    store, file, first = history
    effects_before = {e.effect_key: e.state for e in store.list_effects()}
    events_before = len(store.events())
    done = prune(store, first.time + SECOND, proven(file))
    assert {e.effect_key: e.state for e in store.list_effects()} == effects_before
    assert store.get_approval("apr_open").status is ApprovalStatus.PENDING
    kept = {(e.action_id, str(e.type)) for e in store.events()}
    assert ("act_3", "APPROVAL_REQUESTED") in kept  # an open approval's history
    assert {a for a, _ in kept} >= {"act_2", "act_3", "act_6", "act_7"}  # ambiguous; younger
    assert not {a for a, _ in kept} & {"act_1", "act_4", "act_5"}  # settled and covered
    assert done.events == events_before - len(store.events()) > 0


def test_prune_removes_nothing_younger_than_the_last_checkpoint(history):
    store, file, _ = history
    done = prune(store, store_time(store) + timedelta(days=1), proven(file))
    assert done.anchor.seq == 7 and store.receipts() == ()
    assert store.verify_chain(checkpoints=checkpoint_heads(proven(file))).ok
    store.record((), receipt(8))  # the chain goes on from the anchor
    assert [r.seq for r in store.receipts()] == [8]
    assert store.verify_chain(checkpoints=checkpoint_heads(proven(file))).ok


def store_time(store):
    return store.read(lambda txn: txn.now)


def test_prune_without_a_checkpoint_before_the_date_removes_nothing(history):
    store, file, first = history
    with pytest.raises(ChainRefused) as refused:
        prune(store, first.time, proven(file))  # strictly before: no checkpoint qualifies
    assert refused.value.reason is ChainRefusal.NO_CHECKPOINT
    assert len(store.receipts()) == 7 and store.chain_anchor() is None


def test_prune_refuses_a_chain_that_does_not_verify(history, backend):
    store, file, first = history
    backend.tamper("UPDATE receipts SET result = 'committed' WHERE seq = 4")
    with pytest.raises(ChainRefused) as refused:
        prune(store, first.time + SECOND, proven(file))
    assert refused.value.reason is ChainRefusal.CHAIN_BROKEN
    assert len(store.receipts()) == 7


def test_an_anchor_no_checkpoint_states_is_named(history, backend):
    store, file, first = history
    prune(store, first.time + SECOND, proven(file))
    # an intruder deletes one more receipt and moves the anchor to it (hash copied)
    sixth = store.receipts()[0]
    backend.tamper(
        "DELETE FROM receipts WHERE seq = 6",
        f"UPDATE receipt_anchor SET seq = 6, hash = '{sixth.hash}' WHERE partition_id = 0",
    )
    assert store.verify_chain().ok  # the store alone cannot tell
    report = store.verify_chain(checkpoints=checkpoint_heads(proven(file)))
    found = [(str(b.kind), b.seq) for b in report.breaks]
    assert found == [("anchor_unproven", 6)]


def test_checkpoints_go_on_after_a_prune(history, tmp_path, clock):
    store, file, first = history
    prune(store, first.time + SECOND, proven(file))
    store.record((), receipt(8))
    later = make_checkpoint(store, OPERATOR_PEM, file=file, now=clock())  # the same file
    assert later.heads[0].seq == 8
    fresh = make_checkpoint(store, OPERATOR_PEM, file=tmp_path / "new", now=clock())
    assert fresh.heads[0].head == later.heads[0].head  # a new file starts from the head
    report = store.verify_chain(checkpoints=checkpoint_heads(proven(file)))
    assert report.ok and report.checkpointed == later.heads[0].head


def test_prune_removes_budget_windows_that_ended_before_the_checkpoint(backend, clock, tmp_path):
    """Each budget keeps its newest window (a call may still spend in it) and every window a
    later one followed before the checkpoint goes, with its charges; later windows stay."""
    store = backend.open(clock)
    budget = Budget("amount", 1000, window=2 * SECOND)
    for index in range(3):  # "b" spends in three consecutive windows, at t, t+2 and t+4
        if index:
            clock.advance(2 * SECOND)
        assert consume_budget(store, budget, "b", 10 + index, f"act_b{index}")[0]
    assert consume_budget(store, budget, "lone", 7, "act_lone")[0]  # one window only
    clock.advance(SECOND)  # the checkpoint at t+5: b's third window began before it
    store.record((EventDraft(EventType.ACTION_DENIED, "act_1"),), receipt(1))
    file = tmp_path / "checkpoints"
    made = make_checkpoint(store, OPERATOR_PEM, file=file, now=clock())
    clock.advance(3 * SECOND)  # t+8: a window that began after the checkpoint
    assert consume_budget(store, budget, "b", 99, "act_b_late")[0]  # after the checkpoint
    done = prune(store, made.time + SECOND, proven(file))
    kept = [(b, n) for b, _, n in budget_spend(store)]
    assert kept == [("b", 12), ("b", 99), ("lone", 7)]
    assert done.budget_rows == 4  # b's first two windows and their two charges
    charges = store.read(
        lambda txn: [
            txn.one("budget_charge_get", {"action_id": a})
            for a in ("act_b0", "act_b1", "act_b2", "act_lone", "act_b_late")
        ]
    )
    assert [c is not None for c in charges] == [False, False, True, True, True]
