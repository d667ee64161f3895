"""Lost COMMITs on the durable writes, on the real store through the fault proxy.

A fault is armed at the point the test needs it — inside a database step, inside an outbox
handler, inside a starter, or just before the call — so the next COMMIT the proxy sees is the
one under test. Each test asserts the branch the store logged (or the ``AmbiguousWrite`` it
raised) and the end state: what ran, how often, what the rows hold.

* A plan step's receipt is its witness: landed → the step is not run again; not landed → the
  same transaction is issued once more (the step runs again; its first run never committed);
  a re-read that fails raises ``AmbiguousWrite`` and a resume decides from the receipt.
* An outbox settle is witnessed by its message (this claim's ``attempts``, the settled
  status): landed, re-issued, or unknown — and an unknown settle on a parking topic is parked
  after the lease, never re-sent.
* A claim (outbox, plan, operation start) has no witness: its lost COMMIT is
  ``AmbiguousWrite(no_witness)`` and nothing is delivered, run or started under it; the lease
  it may hold lapses and the next claimant decides, under the fence.
"""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql

from ctrlrun.durable import (
    Dispatcher,
    MessageStatus,
    Operations,
    OperationStatus,
    Outbox,
    PlanRunner,
    Plans,
    PlanStatus,
    PollResult,
    PollState,
    Steps,
)
from ctrlrun.errors import AmbiguityReason, AmbiguousWrite
from support import pg_sql

pytestmark = pytest.mark.postgres

WIDGET = {"action": "inventory.reserve", "arguments": {"item": "widget", "qty": 2}}
GADGET = {"action": "inventory.reserve", "arguments": {"item": "gadget", "qty": 1}}


class Inventory:
    """A database step that inserts into ``inventory`` through the step's own transaction,
    records every run (committed or not), and runs a fault armed for its step index."""

    def __init__(self) -> None:
        self.runs: list[int] = []
        self.faults: dict[int, Any] = {}
        self.steps = Steps()

        @self.steps.db("inventory.reserve")
        def reserve(ctx: Any) -> dict[str, Any]:
            table = sql.Identifier(ctx.schema, "inventory")
            ctx.connection.execute(
                sql.SQL("INSERT INTO {} (item, qty) VALUES (%s, %s)").format(table),
                (ctx.arguments["item"], ctx.arguments["qty"]),
            )
            self.runs.append(ctx.step_index)
            fault = self.faults.pop(ctx.step_index, None)
            if fault is not None:
                fault()
            return {"reserved": ctx.arguments["qty"]}


@pytest.fixture
def inventory(pg_schema) -> Inventory:
    with pg_schema.connect() as conn:
        conn.execute("CREATE TABLE inventory (item text PRIMARY KEY, qty integer)")
    return Inventory()


def rows(pg_schema) -> list[tuple[str, int]]:
    found = pg_sql.execute(
        pg_schema.url, pg_schema.schema, "SELECT item, qty FROM {schema}.inventory ORDER BY item"
    )
    return [(r["item"], r["qty"]) for r in found]


def lapse(pg_schema, table: str, key: str, value: str, column: str) -> None:
    """Move ``column`` one second into the past of the server's clock (time never sleeps)."""
    pg_sql.execute(
        pg_schema.url,
        pg_schema.schema,
        f"UPDATE {{schema}}.{table} SET {column} = now() - interval '1 second'"
        f" WHERE {key} = %(id)s",
        {"id": value},
    )


def approved(store, *steps) -> str:
    plans = Plans(store)
    plan = plans.propose(list(steps), agent="planner")
    return plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bob").plan_id


def cut_unsettled(pg_proxy, cut: str) -> Any:
    """A fault: lose the next COMMIT (``after`` it landed, or ``before``) and refuse the
    re-read's connection, so the store cannot settle it."""

    def fault() -> None:
        getattr(pg_proxy, f"cut_{cut}_commit")()
        pg_proxy.refuse_connections(True)

    return fault


# --- plan steps -----------------------------------------------------------------------------


class TestPlanStep:
    def test_a_step_whose_commit_landed_unanswered_is_ours_and_never_runs_again(
        self, proxied, direct, pg_proxy, branches, inventory, pg_schema
    ):
        plan_id = approved(direct, WIDGET, GADGET)
        inventory.faults[0] = pg_proxy.cut_after_commit
        outcome = PlanRunner(proxied, inventory.steps).run(plan_id)
        assert (pg_proxy.cuts_after_commit, pg_proxy.last_cut_reply) == (1, "COMMIT")
        assert branches() == [("A1_OURS", None)]  # the step's chained receipt, re-read
        assert outcome.ok and outcome.ran == (0, 1) and inventory.runs == [0, 1]
        assert rows(pg_schema) == [("gadget", 1), ("widget", 2)]
        assert direct.verify_chain().ok and direct.verify_chain().total == 2

    def test_a_step_whose_commit_was_swallowed_runs_once_more_and_commits_once(
        self, proxied, direct, pg_proxy, branches, inventory, pg_schema
    ):
        plan_id = approved(direct, WIDGET, GADGET)
        inventory.faults[0] = pg_proxy.cut_before_commit
        outcome = PlanRunner(proxied, inventory.steps).run(plan_id)
        assert pg_proxy.cuts_before_commit == 1
        assert branches() == [("A1_REINSERT", None)]
        assert outcome.ok and inventory.runs == [0, 0, 1]  # the first run never committed
        assert rows(pg_schema) == [("gadget", 1), ("widget", 2)]
        assert [r.step_index for r in outcome.receipts] == [0, 1]

    @pytest.mark.parametrize(("cut", "resumed"), [("after", (1,)), ("before", (0, 1))])
    def test_an_unsettled_step_raises_unknown_and_the_resume_follows_its_receipt(
        self, proxied, direct, pg_proxy, inventory, pg_schema, cut, resumed
    ):
        plan_id = approved(direct, WIDGET, GADGET)
        inventory.faults[0] = cut_unsettled(pg_proxy, cut)
        with pytest.raises(AmbiguousWrite) as caught:
            PlanRunner(proxied, inventory.steps, worker="A").run(plan_id)
        assert caught.value.reason is AmbiguityReason.REREAD_FAILED
        pg_proxy.refuse_connections(False)
        assert Plans(direct).get(plan_id).status is PlanStatus.EXECUTING  # nothing guessed
        lapse(pg_schema, "plans", "plan_id", plan_id, "heartbeat_expires_at")
        outcome = PlanRunner(direct, inventory.steps, worker="B").run(plan_id)
        assert outcome.ok and outcome.ran == resumed
        assert inventory.runs == [0, *resumed]  # a landed step is never run again
        assert rows(pg_schema) == [("gadget", 1), ("widget", 2)]
        epochs = [r.claim_epoch for r in outcome.receipts]
        assert epochs == ([1, 2] if cut == "after" else [2, 2])

    def test_a_claim_whose_commit_is_lost_runs_nothing_and_is_resumed(
        self, proxied, direct, pg_proxy, inventory, pg_schema
    ):
        plan_id = approved(direct, WIDGET)
        pg_proxy.cut_after_commit()  # the run's first COMMIT is its claim
        with pytest.raises(AmbiguousWrite) as caught:
            PlanRunner(proxied, inventory.steps, worker="A").run(plan_id)
        assert caught.value.reason is AmbiguityReason.NO_WITNESS
        assert inventory.runs == []
        claimed = Plans(direct).get(plan_id)
        assert (claimed.status, claimed.claimed_by) == (PlanStatus.EXECUTING, "A")
        lapse(pg_schema, "plans", "plan_id", plan_id, "heartbeat_expires_at")
        assert PlanRunner(direct, inventory.steps, worker="B").run(plan_id).ran == (0,)
        assert inventory.runs == [0] and rows(pg_schema) == [("widget", 2)]


# --- the outbox -------------------------------------------------------------------------------


class Handler:
    """Counts deliveries (with their claim's attempts); runs one armed fault."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.tokens: set[str] = set()
        self.fault: Any = None

    def __call__(self, message: Any) -> None:
        self.calls.append(message.attempts)
        self.tokens.add(message.token)
        fault, self.fault = self.fault, None
        if fault is not None:
            fault()


class TestOutboxSettle:
    @pytest.mark.parametrize(("cut", "branch"), [("after", "A2_LANDED"), ("before", "A2_REISSUE")])
    def test_a_lost_settle_commit_is_settled_by_the_message_row(
        self, proxied, direct, pg_proxy, branches, cut, branch
    ):
        message_id = Outbox(direct).enqueue("mail", {"to": "ops"})
        handler = Handler()
        handler.fault = getattr(pg_proxy, f"cut_{cut}_commit")
        (delivery,) = Dispatcher(proxied, handler).run_once()
        assert branches() == [(branch, None)]
        assert (delivery.status, delivery.fenced) == (MessageStatus.SENT, False)
        message = Outbox(direct).get(message_id)
        assert (message.status, message.attempts) == (MessageStatus.SENT, 1)
        assert Dispatcher(direct, handler).run_once() == () and handler.calls == [1]

    def test_an_unsettled_settle_that_landed_is_never_sent_again(self, proxied, direct, pg_proxy):
        message_id = Outbox(direct).enqueue("mail", {})
        handler = Handler()
        handler.fault = cut_unsettled(pg_proxy, "after")
        with pytest.raises(AmbiguousWrite) as caught:
            Dispatcher(proxied, handler).run_once()
        assert caught.value.reason is AmbiguityReason.REREAD_FAILED
        pg_proxy.refuse_connections(False)
        assert Outbox(direct).get(message_id).status is MessageStatus.SENT
        assert Dispatcher(direct, handler).run_once() == () and handler.calls == [1]

    @pytest.mark.parametrize(
        ("topic", "then", "calls"),
        [("pay", MessageStatus.AMBIGUOUS, [1]), ("mail", MessageStatus.SENT, [1, 2])],
    )
    def test_an_unsettled_settle_that_did_not_land_lapses_into_the_topics_unknown_rule(
        self, proxied, direct, pg_proxy, pg_schema, topic, then, calls
    ):
        """The delivery happened; its settle is unknown and did not land. After the lease, a
        parking topic parks it (at most once: never re-sent); a retry topic re-sends it with
        the same token (at-least-once, as documented)."""
        message_id = Outbox(direct).enqueue(topic, {})
        handler = Handler()
        handler.fault = cut_unsettled(pg_proxy, "before")
        park = {"pay": "park"}
        with pytest.raises(AmbiguousWrite):
            Dispatcher(proxied, handler, on_unknown=park).run_once()
        pg_proxy.refuse_connections(False)
        message = Outbox(direct).get(message_id)
        assert (message.status, message.attempts) == (MessageStatus.PROCESSING, 1)
        lapse(pg_schema, "outbox", "message_id", message_id, "lease_expires_at")
        Dispatcher(direct, handler, on_unknown=park).run_once()
        assert Outbox(direct).get(message_id).status is then
        assert handler.calls == calls and len(handler.tokens) == 1


class TestOutboxClaim:
    @pytest.mark.parametrize(
        ("cut", "topic", "then", "calls"),
        [
            ("after", "mail", MessageStatus.SENT, [2]),
            ("after", "pay", MessageStatus.AMBIGUOUS, []),
            ("before", "mail", MessageStatus.SENT, [1]),
            ("before", "pay", MessageStatus.SENT, [1]),
        ],
    )
    def test_a_claim_whose_commit_is_lost_delivers_nothing_and_is_decided_under_the_fence(
        self, proxied, direct, pg_proxy, pg_schema, cut, topic, then, calls
    ):
        message_id = Outbox(direct).enqueue(topic, {})
        handler, park = Handler(), {"pay": "park"}
        getattr(pg_proxy, f"cut_{cut}_commit")()
        with pytest.raises(AmbiguousWrite) as caught:
            Dispatcher(proxied, handler, on_unknown=park).run_once()
        assert caught.value.reason is AmbiguityReason.NO_WITNESS and handler.calls == []
        message = Outbox(direct).get(message_id)
        if cut == "after":  # it landed: claimed, never delivered, until its lease lapses
            assert (message.status, message.attempts) == (MessageStatus.PROCESSING, 1)
            lapse(pg_schema, "outbox", "message_id", message_id, "lease_expires_at")
        else:
            assert (message.status, message.attempts) == (MessageStatus.PENDING, 0)
        Dispatcher(direct, handler, on_unknown=park).run_once()
        assert Outbox(direct).get(message_id).status is then
        assert handler.calls == calls  # never twice; a parked unknown claim never at all


# --- long-running operations ----------------------------------------------------------------


class Remote:
    def __init__(self) -> None:
        self.starts: list[str] = []
        self.by_token: dict[str, str] = {}
        self.fault: Any = None

    def start(self, operation: Any) -> str:
        self.starts.append(operation.operation_id)
        remote_id = f"remote-{len(self.starts)}"
        self.by_token[operation.start_token] = remote_id
        fault, self.fault = self.fault, None
        if fault is not None:
            fault()
        return remote_id


class TestOperationStart:
    def test_a_start_claim_whose_commit_is_lost_never_starts(
        self, proxied, direct, pg_proxy, pg_schema
    ):
        operation = Operations(direct).submit("branch.reset", "db:main")
        remote = Remote()
        pg_proxy.cut_after_commit()
        with pytest.raises(AmbiguousWrite) as caught:
            Operations(proxied).start(operation.operation_id, remote.start)
        assert caught.value.reason is AmbiguityReason.NO_WITNESS and remote.starts == []
        ops = Operations(direct)
        again = ops.start(operation.operation_id, remote.start)  # the door is closed
        assert (again.status, again.remote_id, remote.starts) == (OperationStatus.RUNNING, None, [])
        lapse(pg_schema, "operations", "operation_id", operation.operation_id, "lease_expires_at")
        (reaped,) = ops.reap()
        assert reaped.reconcile is not None  # a person decides; nothing restarts it
        failed = ops.resolve_start(operation.operation_id, resolver="alice")
        assert failed.status is OperationStatus.FAILED and remote.starts == []

    def test_a_lost_record_of_the_remote_id_is_found_by_polling_never_reissued(
        self, proxied, direct, pg_proxy, pg_schema
    ):
        operation = Operations(direct).submit("branch.reset", "db:main")
        remote = Remote()
        remote.fault = pg_proxy.cut_before_commit  # the next COMMIT records the remote id
        with pytest.raises(AmbiguousWrite):
            Operations(proxied).start(operation.operation_id, remote.start)
        ops = Operations(direct)
        current = ops.get(operation.operation_id)
        assert (current.status, current.remote_id) == (OperationStatus.RUNNING, None)
        lapse(pg_schema, "operations", "operation_id", operation.operation_id, "lease_expires_at")
        ops.reap()

        def find(op: Any) -> PollResult:
            return PollResult(PollState.RUNNING, remote_id=remote.by_token[op.start_token])

        found = ops.poll(operation.operation_id, find)
        assert found.remote_id == "remote-1" and found.reconcile is None
        assert remote.starts == [operation.operation_id]
        assert ops.start(operation.operation_id, remote.start).remote_id == "remote-1"
        assert remote.starts == [operation.operation_id]
