"""The lost-COMMIT rows on a real server, through the fault proxy.

Each test injects one fault with the proxy (never a mock of the database), then asserts the end
state in the database AND the branch the store logged: the outcome alone is also produced by a
store that never re-read. Windows are opened deterministically with the proxy's ``on_cut`` hook
or by holding the store's re-read statement; nothing sleeps to hit a race.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from ctrlrun import Action, Control, Principal
from ctrlrun._time import utc_now
from ctrlrun.config import load_policy_text
from ctrlrun.errors import (
    AlreadyCommitted,
    AmbiguityReason,
    AmbiguousEffect,
    AmbiguousWrite,
    DuplicateEffect,
    DuplicateState,
    NotExecuted,
    OutcomeUnrecorded,
)
from ctrlrun.kernel.approval import ApprovalRequestDraft, ApprovalStatus
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.testing import ManualClock
from support.policies import POLICY
from support.store_calls import finish, start

from .conftest import KEY, in_thread

pytestmark = pytest.mark.postgres

HASH = "sha256:" + "ab" * 32
WAIT = 30.0


def raw_row(pg_schema, key=KEY) -> dict[str, Any] | None:
    """The effect row as the database holds it, write_token included."""
    with pg_schema.connect() as conn:
        cur = conn.execute("SELECT * FROM effects WHERE effect_key = %s", [key])
        names = [d.name for d in cur.description]
        row = cur.fetchone()
    return None if row is None else dict(zip(names, row, strict=True))


def is_effect_reread(sql: str) -> bool:
    """The store's re-read of an effect row (and nothing its write transactions send)."""
    return ".effects WHERE effect_key" in sql and sql.lstrip().upper().startswith("SELECT")


def types(store, action_id=None):
    return [e.type for e in store.events(action_id)]


# --- A1: the reservation insert ----------------------------------------------------------


class TestReservation:
    @pytest.mark.parametrize("key", [KEY, "refund:COMMIT-me", "COMMIT"])
    def test_a_lost_commit_that_landed_is_ours_and_a_blind_retry_is_refused(
        self, proxied, pg_proxy, branches, key
    ):
        pg_proxy.cut_after_commit()
        started = start(proxied, key=key)
        assert (pg_proxy.cuts_after_commit, pg_proxy.last_cut_reply) == (1, "COMMIT")
        assert branches() == [("A1_OURS", key)]
        assert started.reservation.attempt == 1
        record = proxied.get_effect(key)
        assert (record.state, record.action_id) == (EffectState.EXECUTING, "act_1")
        for action_id in ("act_1", "act_2"):  # a blind retry, even wearing our own id
            with pytest.raises(DuplicateEffect) as caught:
                start(proxied, action_id, key)
            assert caught.value.state is DuplicateState.IN_PROGRESS
        assert types(proxied, "act_1").count(EventType.EFFECT_RESERVED) == 1

    def test_a_swallowed_commit_is_reissued_once_as_the_same_attempt(
        self, proxied, pg_proxy, branches, direct
    ):
        direct.put_approval_request(
            ApprovalRequestDraft("apr_1", {"action_id": "act_0"}, HASH, "sha256:p", timedelta(1))
        )
        direct.grant_approval("apr_1", "alice")
        before = proxied.write_transactions
        pg_proxy.cut_before_commit()
        started = start(proxied, approval_id="apr_1", action_hash=HASH)
        assert pg_proxy.cuts_before_commit == 1
        assert branches() == [("A1_REINSERT", KEY)]
        assert started.reservation.attempt == 1 and started.approval.approval_id == "apr_1"
        assert proxied.write_transactions - before == 1
        approval = direct.get_approval("apr_1")
        assert (approval.status, approval.consumed_by) == (ApprovalStatus.CONSUMED, "act_1")
        assert types(direct, "act_1") == [
            EventType.APPROVAL_CONSUMED,
            EventType.EFFECT_RESERVED,
            EventType.EXECUTION_STARTED,
        ]

    def test_a_rival_acting_in_the_cut_window_is_refused_and_left_untouched(
        self, proxied, pg_proxy, branches, open_store, pg_schema
    ):
        rival = open_store(clock=ManualClock(utc_now() + timedelta(hours=1)))  # our lease lapsed
        seen: list[Any] = []

        def rival_acts() -> None:
            try:
                start(rival, "act_rival")
            except AmbiguousEffect as exc:  # it found our lease lapsed and wrote it AMBIGUOUS
                seen.append(exc)
            seen.append(raw_row(pg_schema))

        pg_proxy.cut_after_commit(on_cut=rival_acts)
        with pytest.raises(AmbiguousEffect):
            start(proxied)
        assert branches() == [("A1_REFUSE", KEY)]
        assert isinstance(seen[0], AmbiguousEffect) and seen[1]["state"] == "ambiguous"
        assert raw_row(pg_schema) == seen[1]  # our recovery wrote nothing over the rival's row

    def test_a_rival_reserving_after_our_insert_was_lost_is_refused(
        self, proxied, pg_proxy, branches, direct, pg_schema
    ):
        pg_proxy.cut_before_commit()
        pg_proxy.hold(is_effect_reread)
        ours = in_thread(lambda: start(proxied))
        pg_proxy.wait_held(WAIT)
        start(direct, "act_rival")
        rival_row = raw_row(pg_schema)
        assert pg_proxy.release()
        with pytest.raises(DuplicateEffect) as caught:
            ours.result(WAIT)
        assert caught.value.state is DuplicateState.IN_PROGRESS
        assert branches() == [("A1_REFUSE", KEY)]
        assert raw_row(pg_schema) == rival_row

    def test_two_attempts_wearing_one_action_id_are_told_apart(
        self, open_store, pg_proxy, branches, executor, pg_schema
    ):
        """Same action_id, same frozen clock: the rival's live row equals ours in every column
        but the write token. Concluding ownership from the id would run the executor twice."""
        frozen = ManualClock(utc_now())
        policy = load_policy_text(POLICY)
        ours = Control(policy, open_store(pg_proxy.url, clock=frozen), clock=frozen)
        rival = Control(policy, open_store(clock=frozen), clock=frozen)
        action = Action("stripe.refund", {"payment_id": "pay_1", "amount": 5000}, Principal("bot"))
        twin = Action.from_dict(action.to_dict())
        assert twin.action_id == action.action_id
        entered, leave = threading.Event(), threading.Event()

        def rival_executor(**arguments: Any) -> Any:
            entered.set()
            assert leave.wait(WAIT)
            return executor(**arguments)

        pg_proxy.cut_before_commit()
        pg_proxy.hold(is_effect_reread)
        mine = in_thread(lambda: ours.execute(action, executor))
        pg_proxy.wait_held(WAIT)
        theirs = in_thread(lambda: rival.execute(twin, rival_executor))
        assert entered.wait(WAIT)
        row = raw_row(pg_schema)
        assert (row["action_id"], row["attempt"], row["created_at"]) == (
            action.action_id,
            1,
            frozen(),
        )
        pg_proxy.release()
        with pytest.raises(DuplicateEffect) as caught:
            mine.result(WAIT)
        assert caught.value.state is DuplicateState.IN_PROGRESS
        leave.set()
        theirs.result(WAIT)
        assert len(executor.calls) == 1
        assert branches() == [("A1_REFUSE", KEY)]
        assert raw_row(pg_schema)["state"] == "committed"


# --- A2: later transitions ---------------------------------------------------------------


class TestTransitions:
    @pytest.mark.parametrize("outcome", [EffectState.COMMITTED, EffectState.FAILED])
    def test_a_lost_commit_on_the_outcome_that_landed_is_seen_as_landed(
        self, proxied, pg_proxy, branches, outcome
    ):
        start(proxied)
        pg_proxy.cut_after_commit()
        receipt = finish(proxied, outcome=outcome)
        assert pg_proxy.cuts_after_commit == 1
        assert branches() == [("A2_LANDED", KEY)]
        assert receipt.seq == 1 and [r.seq for r in proxied.receipts()] == [1]
        assert proxied.get_effect(KEY).state is outcome
        if outcome is EffectState.FAILED:
            assert start(proxied, "act_2").reservation.attempt == 2
            assert branches() == [("A2_LANDED", KEY)]  # the renewal needed no recovery

    @pytest.mark.parametrize("outcome", [EffectState.FAILED, EffectState.AMBIGUOUS])
    def test_a_landed_outcome_whose_record_moved_on_is_recognised_by_its_receipt(
        self, proxied, pg_proxy, branches, direct, outcome
    ):
        # The soak found it: the outcome's COMMIT landed, the reply was lost, and before the
        # re-read a rival renewed the FAILED key (or a reconcile settled the AMBIGUOUS one). The
        # effect row is no longer ours, but the receipt written in the same transaction is:
        # the transaction committed, and its receipt is the call's only receipt.
        start(proxied)

        def rival_moves_on() -> None:
            if outcome is EffectState.FAILED:
                start(direct, "act_2")
            else:
                direct.resolve_effect(KEY, EffectState.FAILED, "reconcile:x", by="reconcile")

        pg_proxy.cut_after_commit(on_cut=rival_moves_on)
        receipt = finish(proxied, outcome=outcome)
        assert pg_proxy.cuts_after_commit == 1
        assert branches() == [("A2_LANDED", KEY)]
        assert [r.receipt_id for r in direct.receipts()] == [receipt.receipt_id]
        assert receipt.document["result"] == str(outcome)
        assert direct.verify_chain().ok

    def test_a_swallowed_commit_on_the_outcome_is_reissued(self, proxied, pg_proxy, branches):
        start(proxied)
        pg_proxy.cut_before_commit()
        receipt = finish(proxied)
        assert pg_proxy.cuts_before_commit == 1
        assert branches() == [("A2_REISSUE", KEY)]
        assert proxied.get_effect(KEY).state is EffectState.COMMITTED
        assert [r.receipt_id for r in proxied.receipts()] == [receipt.receipt_id]
        assert proxied.verify_chain().ok

    def test_a_lost_commit_on_a_renewal(self, proxied, direct, pg_proxy, branches):
        """The renewal is written on the planner's path, which a start with an approval takes
        straight away (a plain start tries the folded insert first: the next test)."""
        start(proxied)
        finish(proxied, outcome=EffectState.FAILED)
        direct.put_approval_request(
            ApprovalRequestDraft("apr_2", {"action_id": "act_2"}, HASH, "sha256:p", timedelta(1))
        )
        direct.grant_approval("apr_2", "alice")
        pg_proxy.cut_before_commit()
        started = start(proxied, "act_2", approval_id="apr_2", action_hash=HASH)
        assert started.reservation.attempt == 2
        assert branches() == [("A2_REISSUE", KEY)]
        pg_proxy.cut_after_commit()
        finish(proxied, "act_2", attempt=2, outcome=EffectState.FAILED)
        assert start(proxied, "act_3").reservation.attempt == 3
        assert branches()[-1] == ("A2_LANDED", KEY)

    def test_a_folded_start_whose_refusal_was_lost_asks_the_planner_again(
        self, proxied, pg_proxy, branches
    ):
        """The folded insert met the FAILED record (answered with it, nothing written: its
        COMMIT ended an empty transaction) and the answer was lost: the re-read finds a record
        that is not ours and holds no live attempt, so the planner decides in a new
        transaction — a renewal (decisions 0006, 0032)."""
        start(proxied)
        finish(proxied, outcome=EffectState.FAILED)
        pg_proxy.cut_after_commit()
        assert start(proxied, "act_2").reservation.attempt == 2
        assert (pg_proxy.cuts_after_commit, pg_proxy.last_cut_reply) == (1, "COMMIT")
        assert branches() == [("A1_REFUSE", KEY)]
        record = proxied.get_effect(KEY)
        assert (record.state, record.action_id, record.attempt) == (
            EffectState.EXECUTING,
            "act_2",
            2,
        )

    @pytest.mark.parametrize("cut", ["before", "after"])
    def test_a_loser_whose_answer_was_lost_is_refused_from_the_re_read(
        self, proxied, direct, pg_proxy, branches, cut
    ):
        """A key committed by another call: whether the loser's message never reached the
        server or its answer (the record met, an empty COMMIT) was lost, the re-read finds a
        record without this transaction's token, so nothing of ours landed, and the planner
        refuses from it — naming the receipt that committed it."""
        start(direct)
        finish(direct, result={"ok": 1})
        getattr(pg_proxy, f"cut_{cut}_commit")()
        with pytest.raises(AlreadyCommitted) as caught:
            start(proxied, "act_2")
        assert caught.value.receipt_id == "rcp_act_1_1" and caught.value.result == {"ok": 1}
        assert branches() == [("A1_REFUSE", KEY)]
        record = direct.get_effect(KEY)
        assert (record.action_id, record.attempt) == ("act_1", 1)

    def test_a_mover_in_the_window_is_refused(
        self, proxied, pg_proxy, branches, open_store, pg_schema
    ):
        start(proxied)
        mover = open_store(clock=ManualClock(utc_now() + timedelta(hours=1)))
        pg_proxy.cut_before_commit()
        pg_proxy.hold(is_effect_reread)
        ours = in_thread(lambda: finish(proxied))
        pg_proxy.wait_held(WAIT)
        with pytest.raises(AmbiguousEffect):
            start(mover, "act_mover")  # our lease lapsed on its clock: written AMBIGUOUS
        moved = raw_row(pg_schema)
        pg_proxy.release()
        with pytest.raises(AmbiguousEffect):
            ours.result(WAIT)
        assert branches() == [("A2_REFUSE", KEY)]
        assert raw_row(pg_schema) == moved and proxied.receipts() == ()

    def test_begin_execution_moved_in_the_cut_window(self, proxied, pg_proxy, branches, open_store):
        start(proxied, execute=False)
        mover = open_store(clock=ManualClock(utc_now() + timedelta(hours=1)))
        pg_proxy.cut_after_commit(on_cut=lambda: _expect_ambiguous(lambda: start(mover, "act_m")))
        with pytest.raises(AmbiguousEffect):
            proxied.begin_execution(KEY, "act_1", 1)
        assert branches() == [("A2_REFUSE", KEY)]
        assert proxied.get_effect(KEY).state is EffectState.AMBIGUOUS

    def test_a_lost_resolution_is_reissued(self, proxied, pg_proxy, branches):
        start(proxied)
        finish(proxied, outcome=EffectState.AMBIGUOUS)
        pg_proxy.cut_before_commit()
        record = proxied.resolve_effect(KEY, EffectState.FAILED, "cli:alice")
        assert record.state is EffectState.FAILED and record.resolved_by == "cli:alice"
        assert branches() == [("A2_REISSUE", KEY)]


def _expect_ambiguous(fn) -> None:
    try:
        fn()
    except AmbiguousEffect:
        return
    raise AssertionError("the mover was not refused as ambiguous")


# --- the re-read that fails, and the bound ----------------------------------------------


class TestNoWayBack:
    @pytest.mark.parametrize("landed", [True, False])
    def test_a_lost_commit_and_a_refused_reconnect_writes_nothing_and_runs_nothing(
        self, proxied, pg_proxy, branches, executor, direct, landed
    ):
        control = Control(load_policy_text(POLICY), proxied)
        action = Action("stripe.refund", {"payment_id": "pay_1", "amount": 5000}, Principal("b"))
        if landed:
            pg_proxy.cut_after_commit(on_cut=lambda: pg_proxy.refuse_connections(True))
        else:
            pg_proxy.cut_before_commit()
            pg_proxy.refuse_connections(True)
        with pytest.raises(AmbiguousWrite) as caught:
            control.execute(action, executor)
        assert caught.value.reason is AmbiguityReason.REREAD_FAILED
        assert caught.value.effect_key == KEY
        assert pg_proxy.refused >= 1 and branches() == [] and executor.calls == []
        assert direct.receipts() == ()
        if landed:  # the reservation had landed; nothing was written after it
            assert direct.get_effect(KEY).state is EffectState.EXECUTING
            assert types(direct)[-2:] == [EventType.EFFECT_RESERVED, EventType.EXECUTION_STARTED]
        else:
            assert direct.get_effect(KEY) is None and direct.events() == ()
        pg_proxy.refuse_connections(False)

    def test_every_commit_swallowed_at_reservation_is_bounded(
        self, proxied, pg_proxy, branches, executor, direct
    ):
        control = Control(load_policy_text(POLICY), proxied)
        action = Action("stripe.refund", {"payment_id": "pay_1", "amount": 5000}, Principal("b"))
        pg_proxy.cut_before_commit(times=1000)
        with pytest.raises(AmbiguousWrite) as caught:
            control.execute(action, executor)
        assert caught.value.reason is AmbiguityReason.REISSUE_UNKNOWN
        assert pg_proxy.cuts_before_commit == 2  # the write and its one re-issue
        assert branches() == [("A1_REINSERT", KEY)] and executor.calls == []
        assert direct.get_effect(KEY) is None
        pg_proxy.cut_before_commit(0)

    def test_every_commit_swallowed_at_recording_is_never_failed(self, proxied, pg_proxy, direct):
        control = Control(load_policy_text(POLICY), proxied)
        action = Action("stripe.refund", {"payment_id": "pay_1", "amount": 5000}, Principal("b"))

        def declined(**_: Any) -> Any:
            pg_proxy.cut_before_commit(times=1000)
            raise NotExecuted("card declined")

        with pytest.raises(OutcomeUnrecorded) as caught:  # the executor ran: said so
            control.execute(action, declined)
        assert not isinstance(caught.value, NotExecuted) and caught.value.intended == "failed"
        assert isinstance(caught.value.__cause__, AmbiguousWrite)
        assert caught.value.__cause__.reason is AmbiguityReason.REISSUE_UNKNOWN
        assert direct.get_effect(KEY).state is EffectState.EXECUTING  # never FAILED
        assert pg_proxy.cuts_before_commit == 2
        pg_proxy.cut_before_commit(0)


# --- writes with other witnesses, and none ----------------------------------------------


class TestOtherWrites:
    def test_a_lost_grant_is_seen_by_its_status(self, proxied, pg_proxy, branches):
        proxied.put_approval_request(
            ApprovalRequestDraft("apr_1", {"action_id": "a"}, HASH, "sha256:p", timedelta(1))
        )
        pg_proxy.cut_after_commit()
        granted = proxied.grant_approval("apr_1", "alice")
        assert granted.status is ApprovalStatus.GRANTED
        assert branches() == [("A2_LANDED", None)]

    def test_a_lost_approval_request_is_reinserted(self, proxied, pg_proxy, branches, direct):
        pg_proxy.cut_before_commit()
        draft = ApprovalRequestDraft("apr_1", {"action_id": "a"}, HASH, "sha256:p", timedelta(1))
        assert proxied.put_approval_request(draft).status is ApprovalStatus.PENDING
        assert branches() == [("A1_REINSERT", None)]
        assert [a.approval_id for a in direct.list_approvals()] == ["apr_1"]

    def test_a_lost_receipt_is_seen_by_its_id(self, proxied, pg_proxy, branches):
        pg_proxy.cut_after_commit()
        stored = proxied.record((), {"receipt_id": "rcp_1", "action_id": "a", "result": "denied"})
        assert stored.seq == 1 and branches() == [("A1_OURS", None)]
        assert [r.receipt_id for r in proxied.receipts()] == ["rcp_1"]

    def test_events_alone_have_no_witness_and_fail_closed(self, proxied, pg_proxy, branches):
        pg_proxy.cut_after_commit()
        with pytest.raises(AmbiguousWrite) as caught:
            proxied.record((EventDraft(EventType.ACTION_PROPOSED, "act_1"),))
        assert caught.value.reason is AmbiguityReason.NO_WITNESS
        assert branches() == []


def test_a_protected_call_costs_two_transactions_and_two_round_trips(direct, tmp_path):
    """One round trip to reserve (BEGIN, the guarded insert and the events, COMMIT) and one to
    record (BEGIN, the guarded update, the events, the head lock, the receipt linked on the
    server and the head, COMMIT): decisions 0006 and 0009. More is a performance regression.
    Counted on the wire: libpq's protocol trace, one ReadyForQuery per round trip."""
    control = Control(load_policy_text(POLICY), direct)
    action = Action("stripe.refund", {"payment_id": "pay_9", "amount": 1}, Principal("b"))
    control.execute(action, lambda **_: None)  # warm: connected, nothing lazy left
    conn = direct._engine.connections.current()
    trace = tmp_path / "trace"
    with trace.open("w") as out:
        conn.pgconn.trace(out.fileno())
        before = direct.write_transactions
        action = Action("stripe.refund", {"payment_id": "pay_1", "amount": 1}, Principal("b"))
        control.execute(action, lambda **_: None)
        conn.pgconn.untrace()
    assert direct.write_transactions - before == 2
    lines = trace.read_text().splitlines()
    sent = [line for line in lines if "\tF\t" in line and "\tQuery\t" in line]
    answered = [line for line in lines if "\tB\t" in line and "\tReadyForQuery" in line]
    assert len(answered) == 2 and len(sent) == 2, lines
    assert direct._engine.connections.current() is conn  # no other connection was used


class TestKeptWrites:
    """A lapsed lease is written AMBIGUOUS (kept) before the refusal is raised; a lost COMMIT
    there still ends in the refusal, whatever the re-read finds. The kept write is made on the
    planner's path, which a start with an approval takes straight away (a plain start tries
    the folded insert first, whose lost answer is the last test here)."""

    @pytest.fixture
    def lapsed(self, direct, open_store, pg_proxy):
        start(direct, "act_holder")
        return open_store(pg_proxy.url, clock=ManualClock(utc_now() + timedelta(hours=1)))

    @pytest.fixture
    def approved(self, direct) -> dict[str, Any]:
        draft = ApprovalRequestDraft("apr_l", {"action_id": "x"}, HASH, "sha256:p", timedelta(9))
        direct.put_approval_request(draft)
        direct.grant_approval("apr_l", "alice")
        return {"approval_id": "apr_l", "action_hash": HASH}

    def test_a_lost_commit_on_the_kept_write_that_landed(
        self, lapsed, pg_proxy, branches, direct, approved
    ):
        pg_proxy.cut_after_commit()
        with pytest.raises(AmbiguousEffect):
            start(lapsed, "act_late", **approved)
        assert branches() == [("A2_LANDED", KEY)]
        assert direct.get_effect(KEY).state is EffectState.AMBIGUOUS

    def test_a_kept_write_moved_on_in_the_window_still_refuses(
        self, lapsed, pg_proxy, branches, direct, approved
    ):
        def resolve() -> None:
            direct.resolve_effect(KEY, EffectState.FAILED, "cli:alice")

        pg_proxy.cut_after_commit(on_cut=resolve)
        with pytest.raises(AmbiguousEffect):
            start(lapsed, "act_late", **approved)
        assert branches() == [("A2_REFUSE", KEY)]
        assert direct.get_effect(KEY).state is EffectState.FAILED  # the person's word stands

    def test_a_folded_start_on_a_lapsed_lease_whose_answer_was_lost_refuses(
        self, lapsed, pg_proxy, branches, direct
    ):
        """The folded insert met the lapsed record (answered with it, nothing written) and
        its answer was lost: the re-read hands the record to the planner, which refuses
        AMBIGUOUS; the next start writes the lapsed record AMBIGUOUS (the kept write) and
        refuses the same way."""
        pg_proxy.cut_after_commit()
        with pytest.raises(AmbiguousEffect):
            start(lapsed, "act_late")
        assert pg_proxy.last_cut_reply == "COMMIT"
        assert branches() == [("A1_REFUSE", KEY)]
        with pytest.raises(AmbiguousEffect):
            start(lapsed, "act_later")
        assert direct.get_effect(KEY).state is EffectState.AMBIGUOUS
