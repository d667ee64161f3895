"""A key that exists is answered in the transaction that met it (issue 28): the folded
reservation's CR001 carries the record the server found, and the store refuses from it when
the planner refuses outright; everything the planner would write or grant still goes to the
shared path, which reads and plans anew. Each refusal is the shared path's, field for field.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ctrlrun import Action, Control, Principal
from ctrlrun.config import load_policy_text
from ctrlrun.errors import AlreadyCommitted, AmbiguousEffect, DuplicateEffect, InProgress, Refused
from ctrlrun.kernel.effect import EffectState
from ctrlrun.store.ops.actions import start_action_in_txn
from ctrlrun.store.postgres import folded
from ctrlrun.store.postgres import store as store_module
from ctrlrun.store.protocol import StartRequest
from ctrlrun.store.templates import effect_templates
from ctrlrun.testing import ManualClock
from support.policies import POLICY
from support.store_calls import KEY, finish, start

pytestmark = pytest.mark.postgres

T0 = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
LEASE = timedelta(seconds=30)


@pytest.fixture
def shared_path(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The action ids the store sent to the shared path (``start_action_in_txn``)."""
    entered: list[str] = []

    def counted(txn: Any, request: StartRequest) -> Any:
        entered.append(request.action_id)
        return start_action_in_txn(txn, request)

    monkeypatch.setattr(store_module, "start_action_in_txn", counted)
    return entered


def refused(call: Callable[[], Any]) -> Refused:
    with pytest.raises(Refused) as caught:
        call()
    return caught.value


def same_refusal(fast: Refused, shared: Refused) -> None:
    assert type(fast) is type(shared)
    assert fast.fields() == shared.fields() and str(fast) == str(shared)


def committed(store: Any) -> None:
    start(store, lease=LEASE)
    finish(store, result={"ok": 1})


def executing(store: Any) -> None:
    start(store, lease=LEASE)


def ambiguous(store: Any) -> None:
    start(store, lease=LEASE)
    finish(store, outcome=EffectState.AMBIGUOUS)


@pytest.mark.parametrize(
    ("setup", "kind"),
    [(committed, AlreadyCommitted), (executing, InProgress), (ambiguous, AmbiguousEffect)],
)
def test_a_refusal_comes_from_the_record_met_and_equals_the_shared_paths(
    open_store, shared_path, setup, kind
):
    store = open_store(clock=ManualClock(T0))
    setup(store)
    before = store.write_transactions
    fast = refused(lambda: start(store, "act_2", lease=LEASE))
    assert isinstance(fast, kind) and shared_path == []
    assert store.write_transactions == before  # nothing committed for the refusal
    shared = refused(
        lambda: store.transact(
            lambda txn: start_action_in_txn(txn, StartRequest("act_2", KEY, lease=LEASE))
        )
    )
    same_refusal(fast, shared)


def test_a_committed_duplicate_names_the_committing_receipt(open_store, shared_path):
    store = open_store()
    committed(store)
    fast = refused(lambda: start(store, "act_2"))
    assert isinstance(fast, AlreadyCommitted)
    assert fast.receipt_id == "rcp_act_1_1" and fast.result == {"ok": 1}
    assert store.get_effect(KEY).committed_receipt_id == "rcp_act_1_1"


def test_a_lapsed_lease_goes_to_the_shared_path_which_writes_it_ambiguous(open_store, shared_path):
    clock = ManualClock(T0)
    store = open_store(clock=clock)
    executing(store)
    clock.advance(LEASE + timedelta(seconds=1))
    assert isinstance(refused(lambda: start(store, "act_2", lease=LEASE)), AmbiguousEffect)
    assert shared_path == ["act_2"]
    assert store.get_effect(KEY).state is EffectState.AMBIGUOUS


def test_a_failed_attempt_goes_to_the_shared_path_which_renews_it(open_store, shared_path):
    store = open_store()
    start(store)
    finish(store, outcome=EffectState.FAILED)
    assert start(store, "act_2").reservation.attempt == 2
    assert shared_path == ["act_2"]


def test_a_template_that_differs_goes_to_the_shared_path(open_store, shared_path):
    store = open_store()
    start(store, action_name="pay.refund", effect_template="refund:{id}")
    refusal = refused(
        lambda: start(
            store,
            "act_2",
            key="refund:x",
            action_name="pay.refund",
            effect_template="refund:{other}",
        )
    )
    assert refusal.reason == "effect_template_changed" and shared_path == ["act_2"]


@pytest.mark.parametrize(
    "detail",
    [
        None,
        "",
        "[]",
        "not json",
        '{"state": "committed"}',
        '{"state": "nonsense", "action_id": "a", "attempt": 1, "created_at":'
        ' "2030-01-02T03:04:05", "updated_at": "2030-01-02T03:04:05", "lease_expires_at":'
        ' null, "result_json": null, "error": null, "resolved_by": null,'
        ' "committed_receipt_id": null, "now": "2030-01-02T03:04:05"}',
    ],
)
def test_a_detail_that_cannot_be_read_sends_the_start_to_the_shared_path(detail):
    assert folded.refusal_met(detail, StartRequest("act_2", KEY)) is None


# --- a loser in two round trips (decision 0032) ------------------------------------------


def _traced(store: Any, tmp_path: Path, call: Callable[[], Any]) -> list[str]:
    """The libpq protocol trace of ``call`` on the store's connection (which it must keep)."""
    conn = store._engine.connections.current()
    trace = tmp_path / "trace"
    with trace.open("w") as out:
        conn.pgconn.trace(out.fileno())
        try:
            call()
        finally:
            conn.pgconn.untrace()
    assert store._engine.connections.current() is conn  # no other connection was used
    return trace.read_text().splitlines()


def test_a_losing_call_costs_two_round_trips_and_sends_no_rollback(open_store, tmp_path):
    """The reservation that meets the key (its message commits an empty transaction) and the
    refusal's receipt: counted on the wire, one ReadyForQuery per round trip."""
    store = open_store()
    control = Control(load_policy_text(POLICY), store)

    def refund(n: int) -> Action:
        return Action("stripe.refund", {"payment_id": f"pay_{n}", "amount": 1}, Principal("b"))

    for n in (1, 2):
        control.execute(refund(n), lambda **_: "ok")
    with pytest.raises(DuplicateEffect):  # warm: connected, the refusal's path taken once
        control.execute(refund(1), lambda **_: "again")
    before = store.write_transactions

    def lose() -> None:
        with pytest.raises(DuplicateEffect):
            control.execute(refund(2), lambda **_: "again")

    lines = _traced(store, tmp_path, lose)
    answered = [line for line in lines if "\tB\t" in line and "\tReadyForQuery" in line]
    sent = [line for line in lines if "\tF\t" in line and "\tQuery\t" in line]
    committed = [line for line in lines if "\tB\t" in line and '"COMMIT"' in line]
    assert len(answered) == 2 and len(sent) == 2 and len(committed) == 2, lines
    whole = "\n".join(lines)
    assert whole.count("ctrlrun_reserve_templated(") == 1 and "ROLLBACK" not in whole
    assert store.write_transactions - before == 1  # the refusal's receipt; the empty one is not


def test_the_answer_writes_nothing_and_a_first_template_waits_for_a_reservation_that_lands(
    open_store, pg_schema
):
    """A key met under an action whose template was never recorded: the loser records no
    template and no event (its COMMIT ends an empty transaction); the next reservation that
    lands records it."""
    store = open_store()
    start(store, action_name="pay.refund_old")  # the key, under another action's name
    counted = "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM effect_templates)"
    with pg_schema.connect() as conn:
        before = conn.execute(counted).fetchone()
    refusal = refused(
        lambda: start(store, "act_2", action_name="pay.refund", effect_template="refund:{id}")
    )
    assert isinstance(refusal, InProgress)
    with pg_schema.connect() as conn:
        assert conn.execute(counted).fetchone() == before
    start(store, "act_3", key="refund:y", action_name="pay.refund", effect_template="refund:{id}")
    assert [t.template for t in effect_templates(store, "pay.refund")] == ["refund:{id}"]


def test_a_client_reading_only_the_time_never_takes_a_met_key_for_its_own(open_store, pg_schema):
    """The reservation as a binary from before 0009 queries it (its stamped time alone, a CR001
    expected for a key that exists): a key met answers no time — that binary fails on the
    NULL instead of taking the key for its own — and writes nothing, not even the action's
    first template: the transaction is given no id, so its COMMIT writes no WAL."""
    store = open_store()
    start(store)
    counted = "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM effect_templates)"
    with pg_schema.connect() as conn:
        before = conn.execute(counted).fetchone()
        with conn.transaction():
            row = conn.execute(
                "SELECT r.stamped_at AS now FROM ctrlrun_reserve_templated(%s, 'executing',"
                " 'act_old', 30000000, 'token', NULL, 'mark', 1, %s::jsonb, 'pay.refund',"
                " 'refund:{id}') AS r",
                [KEY, '[["effect.reserved", "act_old", null, null, "{}"]]'],
            ).fetchone()
            assert row == (None,)
            xid = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
            assert xid == (None,)
        assert conn.execute(counted).fetchone() == before
