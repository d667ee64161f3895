"""The two rows that must never be merged: a failure before COMMIT (nothing committed: raise
``WriteFailed``, retryable, no branch) versus a failure during COMMIT (unknown: re-read).

Errors at COMMIT come from the real server: a deferred constraint trigger on the test's own
schema raises the chosen SQLSTATE when COMMIT runs it (once, gated by a sequence, which a
rollback does not rewind).
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from ctrlrun.errors import DuplicateEffect, StoreError, WriteFailed
from ctrlrun.kernel.effect import EffectState
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.store.postgres.txn import PgTxn
from ctrlrun.store.protocol import FinishRequest
from support.store_calls import start

from .conftest import KEY, in_thread, wait_for_lock_waiter

pytestmark = pytest.mark.postgres


def at_first_commit(pg_schema, name: str, statement: str) -> None:
    """A deferred constraint trigger on the store's effects: the first COMMIT that wrote an
    effect row runs ``statement`` inside the server (gated by a sequence, which a rollback does
    not rewind), and later ones run nothing."""
    schema = sql.Identifier(pg_schema.schema)
    sequence = sql.SQL("{}.{}").format(schema, sql.Identifier(name)).as_string(None)
    body = f"BEGIN IF nextval('{sequence}') = 1 THEN {statement}; END IF; RETURN NULL; END"
    with pg_schema.connect() as conn:
        conn.execute(sql.SQL("CREATE SEQUENCE {}").format(sql.SQL(sequence)))
        conn.execute(
            sql.SQL("CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS {}").format(
                sql.SQL(sequence), sql.Literal(body)
            )
        )
        conn.execute(
            sql.SQL(
                "CREATE CONSTRAINT TRIGGER {} AFTER INSERT OR UPDATE ON {}.effects"
                " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {}()"
            ).format(sql.Identifier(name), schema, sql.SQL(sequence))
        )


def commit_fails_once(pg_schema, sqlstate: str) -> None:
    """The next COMMIT that wrote an effect row fails with ``sqlstate``, raised by the server."""
    raised = f"RAISE EXCEPTION 'injected at COMMIT' USING ERRCODE = '{sqlstate}'"
    at_first_commit(pg_schema, "boom", raised)


class TestAtCommit:
    @pytest.mark.parametrize("sqlstate", ["40001", "40P01"])
    def test_a_stated_abort_at_commit_is_a_failed_write(
        self, direct, pg_schema, branches, sqlstate
    ):
        commit_fails_once(pg_schema, sqlstate)
        with pytest.raises(WriteFailed) as caught:
            start(direct)
        assert caught.value.sqlstate == sqlstate and branches() == []
        assert direct.get_effect(KEY) is None and direct.events() == ()
        assert start(direct).reservation.attempt == 1  # retryable at once

    def test_a_timeout_at_commit_is_unknown_and_re_read(self, direct, pg_schema, branches):
        commit_fails_once(pg_schema, "57014")
        started = start(direct)
        assert branches() == [("A1_REINSERT", KEY)]  # the re-read found nothing: issued again
        assert started.reservation.attempt == 1
        assert direct.get_effect(KEY).state is EffectState.EXECUTING

    def test_an_interrupt_after_the_commit_landed_still_interrupts(
        self, direct, branches, monkeypatch
    ):
        original = PgTxn.commit

        def answered_then_interrupted(self: PgTxn) -> str | None:
            monkeypatch.setattr(PgTxn, "commit", original)
            original(self)  # the real COMMIT ran and was answered ...
            raise KeyboardInterrupt  # ... and the caller was interrupted before hearing it

        monkeypatch.setattr(PgTxn, "commit", answered_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            start(direct)
        assert branches() == [("A1_OURS", KEY)]
        assert direct.get_effect(KEY).state is EffectState.EXECUTING

    def test_an_interrupt_before_the_commit_was_sent_issues_nothing_more(
        self, direct, branches, monkeypatch
    ):
        def interrupted(self: PgTxn) -> str | None:
            raise KeyboardInterrupt

        monkeypatch.setattr(PgTxn, "commit", interrupted)
        with pytest.raises(KeyboardInterrupt):
            start(direct)
        assert branches() == [("A1_REINSERT", KEY)]  # what the store saw, logged ...
        monkeypatch.undo()
        assert direct.get_effect(KEY) is None  # ... but nothing was issued again


def commit_waits_once(pg_schema, lock: int) -> None:
    """The next COMMIT that wrote an effect row waits, inside the server, for advisory lock
    ``lock`` (the test's, not the store's): a COMMIT still in flight while the store re-reads."""
    at_first_commit(pg_schema, "waits", f"PERFORM pg_advisory_xact_lock({lock})")


class TestReissue:
    def test_a_re_issue_that_fails_leaves_its_failure_standing(
        self, proxied, pg_proxy, pg_schema, branches
    ):
        commit_fails_once(pg_schema, "40001")  # the swallowed COMMIT never ran the trigger
        pg_proxy.cut_before_commit()
        with pytest.raises(WriteFailed) as caught:
            start(proxied)
        assert caught.value.sqlstate == "40001"
        assert branches() == [("A1_REINSERT", KEY), ("A1_REINSERT", KEY)]  # looked twice
        assert proxied.get_effect(KEY) is None


class TestInFlight:
    def test_a_commit_still_in_flight_during_the_re_read_is_ours_on_a_second_look(
        self, direct, pg_schema, branches, monkeypatch
    ):
        """The COMMIT reached the server, which is still running it, when the connection is
        lost: the re-read sees nothing, the re-issue waits on the in-flight row and is refused
        when it lands, and a second look (no write) finds our row. One reservation, ours."""
        commit_waits_once(pg_schema, 4242)
        original = PgTxn.commit

        def sent_then_lost(self: PgTxn) -> str | None:
            monkeypatch.setattr(PgTxn, "commit", original)
            pgconn = self._conn.pgconn
            pgconn.send_query("; ".join([*self._pending, "COMMIT"]).encode())
            while pgconn.flush():
                pass
            # the message's writes are done and its COMMIT is held: only then is the answer
            # lost (else, on a loaded machine, the re-issue could insert first)
            wait_for_lock_waiter(
                pg_schema.server, "%.ctrlrun_reserve_templated(%", event="advisory"
            )
            pgconn.finish()  # the socket closes before the command tag can arrive
            raise psycopg.OperationalError("connection lost after COMMIT was sent")

        monkeypatch.setattr(PgTxn, "commit", sent_then_lost)
        with pg_schema.connect() as holder:
            holder.execute("SELECT pg_advisory_lock(4242)")
            attempt = in_thread(lambda: start(direct))
            # the re-issue, waiting on the in-flight insert (the in-flight message, whose text
            # holds the same call, waits on the advisory lock instead)
            wait_for_lock_waiter(
                pg_schema.server, "%.ctrlrun_reserve_templated(%", event="transactionid"
            )
            holder.execute("SELECT pg_advisory_unlock(4242)")
        started = attempt.result(30)
        assert branches() == [("A1_REINSERT", KEY), ("A1_OURS", KEY)]
        assert started.reservation.attempt == 1
        record = direct.get_effect(KEY)
        assert (record.state, record.action_id) == (EffectState.EXECUTING, "act_1")
        assert [e.type for e in direct.events()].count(EventType.EFFECT_RESERVED) == 1


class TestBeforeCommit:
    def test_a_statement_timeout_before_commit_is_a_failed_write(
        self, open_store, pg_schema, branches
    ):
        store = open_store(pg_schema.server.url_for(options="-c statement_timeout=300"))
        with pg_schema.connect() as blocker:  # holds the key's insert open: the store must wait
            blocker.execute("BEGIN")
            blocker.execute(
                "INSERT INTO effects (effect_key, state, action_id, attempt, created_at,"
                " updated_at, write_token) VALUES (%s, 'executing', 'act_0', 1, now(), now(), 'x')",
                [KEY],
            )
            with pytest.raises(WriteFailed) as caught:
                start(store)
            blocker.execute("ROLLBACK")
        assert caught.value.sqlstate == "57014" and branches() == []
        assert start(store).reservation.attempt == 1

    def test_a_constraint_violation_sent_with_the_commit_is_a_failed_write(self, direct, branches):
        direct.record((), {"receipt_id": "rcp_1", "action_id": "a", "result": "denied"})
        events = (EventDraft(EventType.ACTION_PROPOSED, "act_2"),)
        with pytest.raises(WriteFailed) as caught:  # the receipt insert travels with COMMIT
            direct.record(events, {"receipt_id": "rcp_1", "action_id": "b", "result": "denied"})
        assert caught.value.sqlstate == "23505" and branches() == []
        assert direct.events("act_2") == () and sum(h.seq for h in direct.chain_heads()) == 1
        assert len(direct.receipts()) == 1

    def test_a_connection_lost_before_commit_is_a_failed_write_and_is_replaced(
        self, open_store, pg_proxy, pg_server, direct, branches
    ):
        store = open_store(pg_proxy.url_for(application_name="victim"))
        # a protected call's writes travel with their COMMIT (decision 0006); a transition on
        # the planner's path still has a statement of its own before it: hold that one
        start(direct, execute=False)
        pg_proxy.hold(lambda s: ".ctrlrun_move_effect(" in s and "COMMIT" not in s)
        attempt = in_thread(lambda: store.begin_execution(KEY, "act_1", 1))
        pg_proxy.wait_held(30)
        with pg_server.connect() as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'victim' AND state = 'idle in transaction'"
            ).fetchall()
        assert killed == [(True,)]
        pg_proxy.release()
        with pytest.raises(WriteFailed):
            attempt.result(30)
        assert branches() == [] and direct.get_effect(KEY).state is EffectState.RESERVED
        moved = in_thread(lambda: store.begin_execution(KEY, "act_1", 1)).result(30)
        assert moved.state is EffectState.EXECUTING

    def test_a_connection_the_server_dropped_fails_one_write_and_is_replaced(
        self, open_store, pg_schema, direct, branches
    ):
        """The store never retries behind the caller's back: a write whose first statement
        meets the dead connection fails (nothing committed); the next one connects again."""
        start(direct, execute=False)
        store = open_store(pg_schema.server.url_for(application_name="dropped"))
        assert len(store.list_effects()) == 1
        terminate_idle(pg_schema.server, "dropped")
        with pytest.raises(WriteFailed):
            store.begin_execution(KEY, "act_1", 1)
        assert branches() == []
        assert store.begin_execution(KEY, "act_1", 1).state is EffectState.EXECUTING

    def test_a_folded_write_on_a_dropped_connection_is_unknown_and_settled_by_re_reading(
        self, open_store, pg_schema, branches
    ):
        """A folded start sends BEGIN and COMMIT in one message: when it meets a dead
        connection nobody can tell whether the server ran it, so it is the unknown row — the
        re-read finds no row and the same transaction is issued once (decision 0006)."""
        store = open_store(pg_schema.server.url_for(application_name="dropped"))
        assert store.list_effects() == ()
        terminate_idle(pg_schema.server, "dropped")
        assert start(store).reservation.attempt == 1
        assert branches() == [("A1_REINSERT", KEY)]
        terminate_idle(pg_schema.server, "dropped")
        with pytest.raises(StoreError) as caught:  # a read on it fails the same way
            store.get_effect(KEY)
        assert not isinstance(caught.value, WriteFailed)
        assert store.get_effect(KEY).state is EffectState.EXECUTING

    def test_a_refused_connection_is_a_failed_write(self, open_store, pg_proxy, direct):
        store = open_store(pg_proxy.url)
        pg_proxy.refuse_connections(True)
        with pytest.raises(WriteFailed):
            in_thread(lambda: start(store)).result(30)  # a new thread needs a new connection
        pg_proxy.refuse_connections(False)
        assert direct.get_effect(KEY) is None

    def test_a_refusal_writes_nothing(self, direct):
        start(direct)
        before = direct.write_transactions
        with pytest.raises(DuplicateEffect):
            start(direct, "act_2")
        assert direct.write_transactions == before and len(direct.events()) == 2


def terminate_idle(server, application_name: str) -> None:
    with server.connect() as conn:
        killed = conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE application_name = %s AND state = 'idle'",
            [application_name],
        ).fetchall()
    assert killed == [(True,)]


def test_an_error_text_postgres_cannot_hold_is_still_recorded(direct):
    """Postgres text cannot hold NUL; an outcome must never fail to be recorded over it."""
    start(direct)
    direct.finish_action(
        FinishRequest(
            action_id="act_1",
            receipt={"receipt_id": "r", "action_id": "act_1", "result": "ambiguous"},
            effect_key=KEY,
            attempt=1,
            outcome=EffectState.AMBIGUOUS,
            error="ValueError: bad\x00byte",
        )
    )
    record = direct.get_effect(KEY)
    assert record.state is EffectState.AMBIGUOUS and record.error == "ValueError: bad\\x00byte"
