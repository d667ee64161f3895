"""Folded writes (decision 0006) on a real server: the same rows as the planner's path, the
chain linked on the server exactly as the kernel links it, the guard's fallback, and a lost
COMMIT on a folded transaction settled by re-reading.

The reference for "the same rows" is the shared ``store/ops`` code run through
``store.transact`` on the same store: the folded path must write what it would have written.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ctrlrun import Action, Control, Principal
from ctrlrun.config import load_policy_text
from ctrlrun.errors import AmbiguousEffect, DuplicateEffect, DuplicateState
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.partition import receipt_partition
from ctrlrun.kernel.receipt import ChainHead, ReceiptDraft, chain_receipt, draft_in_partition
from ctrlrun.store.ops.actions import start_action_in_txn
from ctrlrun.store.postgres.witness import Evidence, Verdict, Write
from ctrlrun.store.protocol import FinishRequest, StartRequest
from ctrlrun.testing import ManualClock
from support.policies import POLICY

from .test_lost_commit import finish, start

pytestmark = pytest.mark.postgres

T0 = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def event_rows(pg_schema, action_id: str) -> list[dict[str, Any]]:
    with pg_schema.connect() as conn:
        cur = conn.execute(
            "SELECT ts, type, action_id, effect_key, approval_id, data_json FROM events"
            " WHERE action_id = %s ORDER BY event_id",
            [action_id],
        )
        names = [d.name for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def effect_row(pg_schema, key: str) -> dict[str, Any]:
    with pg_schema.connect() as conn:
        cur = conn.execute(
            "SELECT state, action_id, attempt, created_at, updated_at, lease_expires_at,"
            " result_json, error, resolved_by FROM effects WHERE effect_key = %s",
            [key],
        )
        names = [d.name for d in cur.description]
        row = cur.fetchone()
    assert row is not None
    return dict(zip(names, row, strict=True))


def request(action_id: str, key: str | None, **kwargs: Any) -> StartRequest:
    pre = (EventDraft(EventType.ACTION_PROPOSED, action_id, None, data={"n": "ü\"'\\"}),)
    return StartRequest(action_id=action_id, effect_key=key, events=pre, **kwargs)


class TestSameRowsAsThePlannersPath:
    @pytest.mark.parametrize("at", [T0, T0.replace(microsecond=0)])  # isoformat drops ".0"
    @pytest.mark.parametrize("execute", [True, False])
    @pytest.mark.parametrize("key", ["refund:pay_1", None])
    def test_a_folded_start_writes_what_start_action_in_txn_writes(
        self, open_store, pg_schema, execute, key, at
    ):
        store = open_store(clock=ManualClock(at))
        other = None if key is None else key + ":generic"
        folded = store.start_action(request("act_f", key, execute=execute))
        generic = store.transact(
            lambda txn: start_action_in_txn(txn, request("act_g", other, execute=execute))
        )
        assert (folded.reservation is None) is (key is None)
        if key is not None and other is not None:
            assert folded.reservation is not None and generic.reservation is not None
            assert folded.reservation.lease_expires_at == generic.reservation.lease_expires_at
            mine, theirs = effect_row(pg_schema, key), effect_row(pg_schema, other)
            assert {**mine, "action_id": "act_g"} == theirs
        strip = [
            {**r, "action_id": None, "effect_key": None} for r in event_rows(pg_schema, "act_f")
        ]
        theirs = event_rows(pg_schema, "act_g")
        assert strip == [{**r, "action_id": None, "effect_key": None} for r in theirs]
        assert [r["ts"] for r in theirs] == [at] * len(theirs)

    @pytest.mark.parametrize("micros", [3, 0])
    def test_on_the_server_clock_every_stamp_is_the_transactions_time(
        self, direct, pg_schema, micros
    ):
        lease = timedelta(seconds=7, microseconds=micros)
        started = direct.start_action(request("act_1", "k:1", lease=lease))
        row = effect_row(pg_schema, "k:1")
        assert row["created_at"] == row["updated_at"]
        assert row["lease_expires_at"] - row["created_at"] == lease  # exact, microseconds
        assert started.reservation is not None
        assert started.reservation.lease_expires_at == row["lease_expires_at"]
        stamps = {r["ts"] for r in event_rows(pg_schema, "act_1")}
        assert stamps == {row["created_at"]}
        reserved = [r for r in event_rows(pg_schema, "act_1") if r["type"] == "EFFECT_RESERVED"]
        expiry = json.loads(reserved[0]["data_json"])["lease_expires_at"]
        assert datetime.fromisoformat(expiry) == row["lease_expires_at"]

    def test_a_folded_finish_moves_the_record_like_effect_move(self, open_store, pg_schema):
        store = open_store(clock=ManualClock(T0))
        start(store)
        finish(store)
        row = effect_row(pg_schema, "refund:pay_1")
        assert (row["state"], row["updated_at"], row["lease_expires_at"]) == ("committed", T0, None)
        assert (row["result_json"], row["error"], row["resolved_by"]) == (None, None, None)


DRAFTS = [
    {"receipt_id": "rcp_a", "action_id": "a", "result": "committed"},
    {"receipt_id": "rcp_b", "action_id": "b", "result": "denied", "note": 'seq "prev_hash" ü €'},
    {
        "receipt_id": "rcp_c",
        "action_id": "c",
        "result": "failed",
        "arguments": {"seq": "x", "prev_hash": "sha256:" + "0" * 64, "emoji": "🙂", "n": 12},
        "error": "tab\there\nnewline \\ backslash \u2028",
    },
]


class TestTheChainLinkedOnTheServer:
    @pytest.mark.parametrize("prepared", [False, True], ids=["mapping", "ReceiptDraft"])
    def test_each_receipt_is_exactly_what_the_kernel_would_have_linked(self, direct, prepared):
        """A plain mapping is encoded whole; a ``ReceiptDraft`` renders the template from its
        prepared parts: the same stored bytes and hash as ``chain_receipt`` either way, in
        the partition the kernel picks (stating it, off partition 0)."""
        for fields in DRAFTS:
            draft = ReceiptDraft(dict(fields), {}) if prepared else fields
            p = receipt_partition(fields.get("effect_key"), fields["action_id"], direct.partitions)
            head = direct.chain_heads()[p]
            stored = direct.record((), draft)
            assert stored is not None and stored.partition == p
            seq, text, digest = chain_receipt(draft_in_partition(draft, p), head)
            assert (stored.seq, stored.text, stored.hash) == (seq, text, digest)
            assert direct.chain_heads()[p] == (seq, digest)
        report = direct.verify_chain()
        assert report.ok and report.verified == len(DRAFTS)

    def test_a_lone_surrogate_is_refused_as_the_kernel_refuses_it(self, direct):
        fields = {"receipt_id": "rcp_s", "action_id": "s", "result": "failed", "error": "\ud800"}
        draft = ReceiptDraft(fields, {})
        with pytest.raises(Exception) as kernel:
            chain_receipt(draft, ChainHead(0, "sha256:" + "0" * 64))
        with pytest.raises(type(kernel.value)):
            direct.record((), draft)
        assert list(direct.receipts()) == [] and direct.chain_head().seq == 0

    def test_a_protected_call_leaves_a_chain_that_verifies(self, direct):
        control = Control(load_policy_text(POLICY), direct)
        for n in range(3):
            action = Action("stripe.refund", {"payment_id": f"p{n}", "amount": 1}, Principal("b"))
            receipt = control.execute(action, lambda **_: None)
            p = receipt_partition(f"refund:p{n}", receipt["action_id"], direct.partitions)
            assert receipt.partition == p and receipt["result"] == "committed"
            assert receipt["seq"] == direct.chain_heads()[p].seq
        assert direct.verify_chain().ok


class TestTheGuard:
    def test_an_outcome_for_a_record_that_moved_is_refused_and_nothing_commits(self, direct):
        start(direct)
        finish(direct, outcome=EffectState.COMMITTED)
        head, events = direct.chain_head(), len(direct.events())
        with pytest.raises(DuplicateEffect) as caught:  # CR001, then the planner's refusal
            finish(direct, outcome=EffectState.FAILED)
        assert caught.value.state is DuplicateState.COMMITTED
        assert direct.chain_head() == head and len(direct.events()) == events
        assert direct.get_effect("refund:pay_1").state is EffectState.COMMITTED

    def test_ambiguous_settles_a_reserved_record_through_the_planners_path(self, direct):
        start(direct, execute=False)  # RESERVED: the folded move (from EXECUTING) matches none
        receipt = finish(direct, outcome=EffectState.AMBIGUOUS)
        assert receipt.seq == 1
        assert direct.get_effect("refund:pay_1").state is EffectState.AMBIGUOUS

    def test_a_lapsed_lease_found_by_a_contender_refuses_the_late_outcome(self, open_store):
        clock = ManualClock(T0)
        store = open_store(clock=clock)
        start(store, lease=timedelta(seconds=1))
        clock.advance(timedelta(seconds=2))
        with pytest.raises(AmbiguousEffect):
            start(store, "act_2")
        with pytest.raises(AmbiguousEffect):
            finish(store)
        assert store.get_effect("refund:pay_1").state is EffectState.AMBIGUOUS


class TestLostCommitOnAFoldedTransaction:
    def test_a_finish_whose_answer_was_lost_is_ours_and_its_receipt_is_read_back(
        self, proxied, direct, pg_proxy, branches
    ):
        start(proxied)
        pg_proxy.cut_after_commit()
        receipt = finish(proxied)
        assert (pg_proxy.cuts_after_commit, pg_proxy.last_cut_reply) == (1, "COMMIT")
        assert branches() == [("A2_LANDED", "refund:pay_1")]
        assert [receipt] == list(direct.receipts())
        assert direct.verify_chain().ok

    def test_a_record_whose_answer_was_lost_is_recognised_by_its_receipt(
        self, proxied, direct, pg_proxy, branches
    ):
        pg_proxy.cut_after_commit()
        stored = proxied.record((), DRAFTS[1])
        assert branches() == [("A1_OURS", None)]
        assert stored is not None and [stored] == list(direct.receipts())

    def test_a_swallowed_record_is_appended_once(self, proxied, direct, pg_proxy, branches):
        pg_proxy.cut_before_commit()
        stored = proxied.record((), DRAFTS[2])
        assert pg_proxy.cuts_before_commit == 1
        assert branches() == [("A1_REINSERT", None)]
        assert stored is not None and stored.seq == 1 and [stored] == list(direct.receipts())


class TestTheReceiptWitness:
    """``receipt_append_folded``'s judge, pure: ours only with our text, its seq and a hash
    that matches."""

    def evidence(self) -> tuple[Evidence, dict[str, Any]]:
        template = '{"prev_hash":"PREV","receipt_id":"r","seq":"SEQ"}'
        params = {"receipt_id": "r", "template": template, "seq_mark": '"SEQ"', "prev_mark": "PREV"}
        write = Write("receipt_append_folded", params)
        ev = Evidence("receipt", "receipt_get", {"receipt_id": "r"}, write, write)
        text = '{"prev_hash":"sha256:aa","receipt_id":"r","seq":4}'
        row = {"seq": 4, "document": text, "hash": _sha(text)}
        return ev, row

    def test_our_row_is_landed_and_no_row_is_not(self):
        ev, row = self.evidence()
        assert ev.judge(row) is Verdict.LANDED
        assert ev.judge(None) is Verdict.NOT_LANDED

    @pytest.mark.parametrize(
        "change",
        [
            {"seq": 5},
            {"seq": None},
            {"hash": "sha256:00"},
            {"document": '{"prev_hash":"sha256:aa","receipt_id":"r","seq":4,"x":1}'},
            {"document": "not json"},
            {"document": "[1]"},
            {"document": '{"prev_hash":7,"receipt_id":"r","seq":4}'},
        ],
    )
    def test_anything_else_is_not_ours(self, change):
        ev, row = self.evidence()
        changed = {**row, **change}
        if "document" in change and "hash" not in change:
            changed["hash"] = _sha(changed["document"])
        assert ev.judge(changed) is Verdict.OTHER


def _sha(text: str) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_finish_request_without_an_outcome_writes_only_the_receipt(direct):
    receipt = direct.finish_action(
        FinishRequest(
            action_id="a",
            receipt={"receipt_id": "rcp_x", "action_id": "a", "result": "committed"},
            effect_key=None,
        )
    )
    assert receipt.seq == 1 and direct.list_effects() == ()


@pytest.mark.timeout(120)
def test_eight_threads_appending_at_once_leave_one_unbroken_chain(direct):
    """The server links each receipt under its partition's head lock: concurrent protected
    calls on distinct keys (one connection per thread) leave each chain seq 1..n, every
    link right, the 120 receipts spread over the store's 64 chains."""
    import threading

    control = Control(load_policy_text(POLICY), direct)
    barrier, errors = threading.Barrier(8), []

    def calls(t: int) -> None:
        try:
            barrier.wait(30)
            for n in range(15):
                args = {"payment_id": f"t{t}-{n}", "amount": 1}
                control.execute(Action("stripe.refund", args, Principal("b")), lambda **_: None)
        except BaseException as exc:  # reported below, never swallowed
            errors.append(exc)

    threads = [threading.Thread(target=calls, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert errors == [] and not any(t.is_alive() for t in threads)
    report = direct.verify_chain()
    assert report.ok and report.verified == 120 and direct.partitions == 64
    chains: dict[int, list[int]] = {}
    for receipt in direct.receipts():
        chains.setdefault(receipt.partition, []).append(receipt.seq or 0)
    assert all(sorted(seqs) == list(range(1, len(seqs) + 1)) for seqs in chains.values())
    assert len(chains) > 30 and sum(map(len, chains.values())) == 120


class TestTheBinder:
    """``PgTxn`` binds queued statements with psycopg's public ``ClientCursor.mogrify``: every
    value comes back from the server as it went in, whatever the quoting mode."""

    VALUES: tuple[Any, ...] = (
        None,
        "plain",
        'it\'s "quoted"',
        '{"a":"b\'c","d":[1,2.5,null]} ' * 40,
        "back\\slash \\x00 and \\' ",
        "ü 🎉 \u2028",
        "%(not_a_name)s %% 100%",
        0,
        -7,
        2**40,
        True,
        T0,
        timedelta(seconds=30, microseconds=5),
        ["EFFECT_RESERVED", None, "q\"'\\", "ü"],
    )

    @pytest.mark.parametrize("conforming", ["on", "off"])
    @pytest.mark.parametrize("value", VALUES, ids=repr)
    def test_a_bound_value_reads_back_as_it_was(self, pg_schema, value, conforming):
        from psycopg.rows import dict_row

        from ctrlrun.store.postgres.sqltext import queries_for
        from ctrlrun.store.postgres.txn import PgTxn

        with pg_schema.connect(row_factory=dict_row, autocommit=True) as conn:
            conn.execute(f"SET standard_conforming_strings = {conforming}")
            txn = PgTxn(conn, queries_for(pg_schema.schema), schema=pg_schema.schema)
            cast = "::text[]" if isinstance(value, list) else ""  # an array literal is untyped
            bound = txn._bind_text(f"SELECT %(v)s{cast} AS v", {"v": value})
            assert conn.execute(bound).fetchone() == {"v": value}

    @pytest.mark.parametrize(
        "values",
        [
            [],
            [None],
            ["", "NULL", "null", '"', "\\", '\\"', "{}", "{a,b}", ",", " spaced ", "'"],
            ['{"k":"v\\\\u0000 \\"q\\""}', "ü 🎉 \u2028", "\t\n\r", None, "x", "\\u00fc"],
        ],
        ids=repr,
    )
    def test_the_events_json_reads_back_as_the_events_were(self, pg_schema, values):
        """Every text of an event (its data JSON above all) comes back from the jsonb array
        the server reads, character for character, None as SQL NULL."""
        from ctrlrun.kernel.event import EventDraft, EventType
        from ctrlrun.kernel.evidence_text import event_data_json
        from ctrlrun.store.postgres.folded import events_json

        drafts = [
            EventDraft(EventType.EFFECT_RESERVED, value, value, data={"v": value})
            for value in values
        ]
        read = (
            "SELECT e.row ->> 0, e.row ->> 1, e.row ->> 2, e.row ->> 3, e.row ->> 4"
            " FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(row, i) ORDER BY e.i"
        )
        with pg_schema.connect() as conn:
            rows = conn.execute(read, [events_json(drafts)]).fetchall()
        assert rows == [
            ("EFFECT_RESERVED", d.action_id, d.effect_key, None, event_data_json(d.data))
            for d in drafts
        ]


class TestTheExchange:
    """``PgTxn._send`` sends queued statements as one message: the server's error comes out as
    psycopg raises it, and the rows and the COMMIT's tag are kept."""

    def test_an_error_before_the_commit_is_psycopgs_and_leaves_the_transaction_failed(
        self, pg_schema
    ):
        import psycopg
        from psycopg import pq
        from psycopg.rows import dict_row

        from ctrlrun.store.postgres.sqltext import queries_for
        from ctrlrun.store.postgres.txn import PgTxn

        queries = queries_for(pg_schema.schema)
        with pg_schema.connect(row_factory=dict_row, autocommit=True) as conn:
            txn = PgTxn(conn, queries, schema=pg_schema.schema)
            with pytest.raises(psycopg.errors.DivisionByZero):
                txn._send(["BEGIN", "SELECT 1 AS one", "SELECT 1 / 0", "COMMIT"])
            assert conn.info.transaction_status == pq.TransactionStatus.INERROR
            conn.execute("ROLLBACK")
            txn._pending = ["BEGIN", "SELECT 2 AS two"]
            txn._wanted = {1: "two"}
            assert txn.commit() == "COMMIT"
            assert txn.returned["two"] == [{"two": 2}]
