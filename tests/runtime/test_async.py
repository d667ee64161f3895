"""Async protected calls on a real SQLite file and the real test Postgres (``backend``).

Every guarantee of the sync path, awaited: the outcome table, cancellation and timeouts
(recorded, shielded, then propagated), one execution per key under 200 tasks, async reconcile
hooks, excluded parameters, the principal across tasks and threads, and one action hash
whichever way a call enters.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading

import anyio
import pytest

import ctrlrun
from ctrlrun import (
    ActionDenied,
    AmbiguousEffect,
    Control,
    DuplicateEffect,
    EffectState,
    InvalidArgument,
    NotExecuted,
)
from ctrlrun.config import load_policy_text
from ctrlrun.durable import PlanRunner, Plans, Steps
from ctrlrun.errors import AlreadyCommitted, InProgress
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.runtime.call import CallSpec

BOT = ("support-bot", "alice")

MAIL_POLICY = """\
schema: ctrlrun.policy/v1
actions:
  mail.send:
    decision: allow
    effect: "mail:{to}:{subject}"
    resource: "mailbox:{to}"
"""


def run(coro_fn, *args):
    """Run ``coro_fn(*args)`` in a fresh event loop, inside the bot's context."""

    async def main():
        with ctrlrun.context(*BOT):
            return await coro_fn(*args)

    return asyncio.run(main())


@pytest.fixture
def remote_calls():
    return []


@pytest.fixture
def refund(control, remote_calls):
    @ctrlrun.protect("stripe.refund", control=control)
    async def refund(payment_id: str, amount: int):
        await asyncio.sleep(0)
        remote_calls.append((payment_id, amount))
        return {"refunded": amount, "token": ctrlrun.idempotency_token()}

    return refund


class TestOutcomes:
    def test_an_async_function_stays_async_and_commits_once(self, refund, store, remote_calls):
        assert asyncio.iscoroutinefunction(refund)
        value = run(refund, "pay_1", 500)
        assert value["refunded"] == 500 and remote_calls == [("pay_1", 500)]
        assert value["token"] == ctrlrun.idempotency_token_for("refund:pay_1", 1)
        assert store.get_effect("refund:pay_1").state is EffectState.COMMITTED
        [receipt] = store.receipts()
        assert receipt["result"] == "committed" and receipt["principal"]["agent"] == BOT[0]

    def test_the_happy_path_costs_two_write_transactions(self, refund, store):
        run(refund, "pay_warm", 1)
        before = store.write_transactions
        run(refund, "pay_1", 1)
        assert store.write_transactions - before == 2

    def test_not_executed_fails_and_the_retry_runs(self, control, store):
        attempts = []

        @ctrlrun.protect("stripe.refund", control=control)
        async def refund(payment_id: str, amount: int):
            attempts.append(1)
            if len(attempts) == 1:
                raise NotExecuted("connection refused")
            return "ok"

        with pytest.raises(NotExecuted):
            run(refund, "pay_1", 5)
        assert store.get_effect("refund:pay_1").state is EffectState.FAILED
        assert run(refund, "pay_1", 5) == "ok"
        assert store.get_effect("refund:pay_1").attempt == 2

    def test_an_exception_is_ambiguous_and_the_retry_refused(self, control, store):
        @ctrlrun.protect("stripe.refund", control=control)
        async def refund(payment_id: str, amount: int):
            raise ConnectionResetError("reply lost")

        with pytest.raises(ConnectionResetError):
            run(refund, "pay_1", 5)
        assert store.get_effect("refund:pay_1").state is EffectState.AMBIGUOUS
        with pytest.raises(AmbiguousEffect):
            run(refund, "pay_1", 5)

    def test_a_committed_key_replays_its_result_and_receipt(self, refund, store):
        first = run(refund, "pay_1", 5)
        with pytest.raises(AlreadyCommitted) as replay:
            run(refund, "pay_1", 5)
        committed = next(r for r in store.receipts() if r["result"] == "committed")
        assert replay.value.result == first and replay.value.receipt_id == committed.receipt_id
        assert isinstance(replay.value, DuplicateEffect)
        assert "Do not repeat it" in replay.value.for_model()
        assert committed.receipt_id in replay.value.for_model()


class TestCancellation:
    def cancel_inside(self, control, cancel):
        """Call a refund whose executor is entered, then ``cancel`` it; return what it raised."""
        entered = []

        @ctrlrun.protect("stripe.refund", control=control)
        async def refund(payment_id: str, amount: int):
            entered.append(1)
            await anyio.sleep_forever()

        return asyncio.run(cancel(refund)), entered

    def test_a_cancelled_task_is_ambiguous_and_the_cancellation_propagates(self, control, store):
        inside = []

        @ctrlrun.protect("stripe.refund", control=control)
        async def refund(payment_id: str, amount: int):
            inside[0].set()
            await anyio.sleep_forever()

        async def main():
            inside.append(asyncio.Event())
            with ctrlrun.context(*BOT):
                task = asyncio.ensure_future(refund("pay_1", 5))
            await inside[0].wait()  # the executor is running
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert store.get_effect("refund:pay_1").state is EffectState.AMBIGUOUS
        with pytest.raises(AmbiguousEffect):
            run(self.refund_of(control), "pay_1", 5)

    def test_a_timeout_mid_executor_is_ambiguous(self, control, store):
        async def cancel(refund):
            with ctrlrun.context(*BOT):
                try:
                    async with asyncio.timeout(0.2):
                        await refund("pay_1", 5)
                except TimeoutError:
                    return "timed out"
            return "finished"

        result, entered = self.cancel_inside(control, cancel)
        assert result == "timed out" and entered == [1]
        assert store.get_effect("refund:pay_1").state is EffectState.AMBIGUOUS
        [receipt] = store.receipts()
        assert receipt["result"] == "ambiguous" and "CancelledError" in receipt["error"]

    def test_an_anyio_cancel_scope_is_ambiguous(self, control, store):
        async def cancel(refund):
            with ctrlrun.context(*BOT), anyio.move_on_after(0.2) as scope:
                await refund("pay_1", 5)
            return scope.cancelled_caught

        assert self.cancel_inside(control, cancel)[0] is True
        assert store.get_effect("refund:pay_1").state is EffectState.AMBIGUOUS

    def test_cancelled_before_the_executor_is_failed_and_never_ran(self, store, clock):
        reserved, resume = threading.Event(), threading.Event()

        class PausedAfterReserving:
            """The store, with a pause point after the first transaction (on the store
            thread that reserved, before the executor is entered)."""

            def __getattr__(self, name):
                return getattr(store, name)

            def start_action(self, request):
                started = store.start_action(request)
                reserved.set()
                resume.wait(10)
                return started

        control = Control(load_policy_text(MAIL_POLICY), PausedAfterReserving(), clock=clock)
        ran = []

        @ctrlrun.protect("mail.send", control=control)
        async def send(to: str, subject: str):
            ran.append(to)

        async def main():
            with ctrlrun.context(*BOT):
                task = asyncio.ensure_future(send("a@example.com", "hi"))
            assert await anyio.to_thread.run_sync(reserved.wait, 10)
            task.cancel()
            resume.set()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert ran == []
        assert store.get_effect("mail:a@example.com:hi").state is EffectState.FAILED

    @staticmethod
    def refund_of(control):
        @ctrlrun.protect("stripe.refund", control=control)
        async def refund(payment_id: str, amount: int):
            return "again"

        return refund


class TestManyTasks:
    def test_200_tasks_on_one_key_execute_once(self, control, store):
        executed = []

        @ctrlrun.protect("stripe.refund", control=control)
        async def refund(payment_id: str, amount: int):
            executed.append(payment_id)
            await asyncio.sleep(0.01)
            return "done"

        async def main():
            with ctrlrun.context(*BOT):
                calls = [refund("pay_1", 5) for _ in range(200)]
                return await asyncio.gather(*calls, return_exceptions=True)

        results = asyncio.run(main())
        assert executed == ["pay_1"] and results.count("done") == 1
        assert all(isinstance(r, AlreadyCommitted | InProgress) for r in results if r != "done")
        assert store.get_effect("refund:pay_1").state is EffectState.COMMITTED

    def test_200_tasks_on_distinct_keys_all_commit_and_the_chain_verifies(self, refund, store):
        async def main():
            with ctrlrun.context(*BOT):
                return await asyncio.gather(*(refund(f"pay_{i}", i + 1) for i in range(200)))

        results = asyncio.run(main())
        assert sorted(r["refunded"] for r in results) == list(range(1, 201))
        report = store.verify_chain()
        assert report.ok and report.verified == 200


class TestReconcile:
    def test_an_async_hook_settles_the_ambiguous_attempt_it_is_told_about(self, control, store):
        asked = []

        async def hook(effect_key, *, attempt, idempotency_token):
            await asyncio.sleep(0)
            asked.append((effect_key, attempt, idempotency_token))
            return "not_executed"

        outcomes = [ConnectionResetError("lost"), "ok"]

        @ctrlrun.protect("stripe.refund", control=control, reconcile=hook)
        async def refund(payment_id: str, amount: int):
            outcome = outcomes.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        with pytest.raises(ConnectionResetError):
            run(refund, "pay_1", 5)
        assert run(refund, "pay_1", 5) == "ok"
        token = ctrlrun.idempotency_token_for("refund:pay_1", 1)
        assert asked == [("refund:pay_1", 1, token)]
        assert store.get_effect("refund:pay_1").attempt == 2

    def test_a_sync_hook_gets_the_attempt_too(self, control, store):
        asked = []

        def hook(effect_key, attempt):
            asked.append((effect_key, attempt))
            return "committed"

        @ctrlrun.protect("stripe.refund", control=control, reconcile=hook)
        def refund(payment_id: str, amount: int):
            raise ConnectionResetError("lost")

        with ctrlrun.context(*BOT), pytest.raises(ConnectionResetError):
            refund("pay_1", 5)
        with ctrlrun.context(*BOT), pytest.raises(AlreadyCommitted):
            refund("pay_1", 5)
        assert asked == [("refund:pay_1", 1)]

    def test_an_async_hook_on_a_sync_function_is_refused_at_decoration(self, control):
        async def hook(effect_key):
            return "unknown"

        with pytest.raises(InvalidArgument, match="async reconcile hook"):

            @ctrlrun.protect("stripe.refund", control=control, reconcile=hook)
            def refund(payment_id: str, amount: int):
                return None


class TestShapes:
    @pytest.mark.parametrize("kind", ["generator", "async generator"])
    def test_generators_are_refused_at_decoration(self, control, kind):
        def gen(payment_id: str, amount: int):
            yield payment_id

        async def agen(payment_id: str, amount: int):
            yield payment_id

        with pytest.raises(InvalidArgument, match="generator"):
            ctrlrun.protect("stripe.refund", control=control)(gen if kind == "generator" else agen)

    def test_a_sync_executor_returning_a_coroutine_never_runs_it_nor_commits(self, control, store):
        ran = []

        async def work():
            ran.append(1)

        @ctrlrun.protect("stripe.refund", control=control)
        def refund(payment_id: str, amount: int):
            return work()

        with ctrlrun.context(*BOT), pytest.raises(InvalidArgument, match="awaitable"):
            refund("pay_1", 5)
        assert ran == [] and store.get_effect("refund:pay_1").state is EffectState.FAILED

    def test_excluded_parameters_reach_the_function_and_nothing_else(self, control, store):
        class Client:
            def __init__(self):
                self.sent = []

        class Mailer:
            def __init__(self):
                self.tag = "mailer-1"

            @ctrlrun.protect("stripe.refund", control=control, exclude=("client",))
            async def refund(self, payment_id: str, amount: int, client: Client):
                client.sent.append((self.tag, payment_id))
                return amount

        client = Client()
        assert run(Mailer().refund, "pay_1", 5, client) == 5
        assert client.sent == [("mailer-1", "pay_1")]
        [receipt] = store.receipts()
        assert receipt["arguments"] == {"payment_id": "pay_1", "amount": 5}
        expected = Action("stripe.refund", {"payment_id": "pay_1", "amount": 5}, Principal(*BOT))
        assert receipt["action_hash"] == expected.action_hash

    def test_exclude_must_name_parameters_no_template_uses(self, control):
        with pytest.raises(InvalidArgument, match="not a parameter"):
            ctrlrun.protect("crm.read", control=control, exclude=("client",))(lambda x: x)
        with pytest.raises(InvalidArgument, match="excluded"):

            @ctrlrun.protect(
                "stripe.refund", control=control, effect="r:{payment_id}", exclude=("payment_id",)
            )
            def refund(payment_id: str, amount: int):
                return None

    def test_a_policy_template_naming_an_excluded_parameter_refuses_the_call(self, control, store):
        @ctrlrun.protect("stripe.refund", control=control, exclude=("payment_id",))
        def refund(payment_id: str, amount: int):
            return None

        with ctrlrun.context(*BOT), pytest.raises(ctrlrun.ProtectionMismatch) as caught:
            refund("pay_1", 5)
        assert caught.value.findings == (
            "stripe.refund: the effect template 'refund:{payment_id}' names 'payment_id',"
            " which the function has no parameter for",
        )
        assert store.get_effect("refund:pay_1") is None and not store.receipts()


class TestPrincipal:
    def test_tasks_inherit_the_principal(self, refund, store):
        async def main():
            with ctrlrun.context("task-bot"):
                async with anyio.create_task_group() as group:
                    group.start_soon(refund, "pay_1", 1)
                    group.start_soon(refund, "pay_2", 2)

        asyncio.run(main())
        assert {r["principal"]["agent"] for r in store.receipts()} == {"task-bot"}

    def test_a_bare_thread_loses_it_and_is_told_the_fix(self, control, store):
        @ctrlrun.protect("crm.read", control=control)
        def read(customer: str):
            return customer

        caught = []

        def in_thread():
            try:
                read("c1")
            except ActionDenied as exc:
                caught.append(exc)

        with ctrlrun.context(*BOT):
            thread = threading.Thread(target=in_thread)
            thread.start()
            thread.join()
            copied = threading.Thread(target=contextvars.copy_context().run, args=(read, "c2"))
            copied.start()
            copied.join()
        [denied] = caught
        assert "asyncio.to_thread" in str(denied) and "copy_context" in str(denied)
        assert [r["arguments"] for r in store.receipts() if r["result"] == "committed"] == [
            {"customer": "c2"}
        ]

    def test_asyncio_to_thread_keeps_it(self, control, store):
        @ctrlrun.protect("crm.read", control=control)
        def read(customer: str):
            return customer

        async def main():
            with ctrlrun.context(*BOT):
                return await asyncio.to_thread(read, "c1")

        assert asyncio.run(main()) == "c1"


class TestOneNormalize:
    def test_protect_control_and_the_plan_runner_hash_one_call_alike(self, store, clock):
        control = Control(load_policy_text(MAIL_POLICY), store, clock=clock)
        arguments = {"to": "ops@example.com", "subject": "hi"}

        @ctrlrun.protect("mail.send", control=control)
        async def send(to: str, subject: str):
            return "sent"

        principal = Principal("planner", "alice")
        with ctrlrun.context("planner", "alice"):
            asyncio.run(send(**arguments))
        by_hand = Action("mail.send", arguments, principal)
        control.run(by_hand, lambda **_: "sent", CallSpec(effect_key="mail:by-hand"))
        steps = Steps()
        steps.external("mail.send")(lambda **_: "sent")
        plans = Plans(store)
        plan = plans.propose(
            [{"action": "mail.send", "arguments": arguments}], agent="planner", user="alice"
        )
        plans.approve(plan.plan_id, plan_hash=plan.plan_hash, approver="bob")
        PlanRunner(store, steps, control=control).run(plan.plan_id)
        # the plan's step meets the key the protected call committed: refused, with a receipt
        receipts = [r for r in store.receipts() if r["result"] != "ok"]  # not the plan's own
        assert [r["result"] for r in receipts] == ["committed", "committed", "blocked"]
        assert {r["resource"] for r in receipts} == {"mailbox:ops@example.com"}
        assert len({r["action_hash"] for r in receipts}) == 1


class TestModelText:
    def test_every_refusal_has_a_short_model_text(self):
        refusals = [
            ActionDenied("no", reason=ctrlrun.DenyReason.POLICY),
            ctrlrun.ApprovalRequired("wait", request_id="apr_1"),
            AmbiguousEffect("unknown", effect_key="k"),
            InProgress("busy", effect_key="k"),
            AlreadyCommitted("done", effect_key="k", result=1, receipt_id="rcp_1"),
        ]
        for refusal in refusals:
            text = refusal.for_model()
            assert (0 < len(text) <= 200 and "Do not retry" in text) or "Do not repeat" in text
        assert NotExecuted("refused by the bank").for_model().endswith("refused by the bank")


class TestApprovalInTasks:
    def test_with_approval_is_presented_from_inside_a_coroutine(self, control, store):
        ran = []

        @ctrlrun.protect("stripe.refund", control=control)
        async def refund(payment_id: str, amount: int):
            ran.append(amount)
            return "refunded"

        with pytest.raises(ctrlrun.ApprovalRequired) as needed:
            run(refund, "pay_big", 200_000)
        store.grant_approval(needed.value.request_id, "bob")

        async def approved():
            with ctrlrun.with_approval(needed.value.request_id):
                return await asyncio.create_task(refund("pay_big", 200_000))

        assert run(approved) == "refunded" and ran == [200_000]
        [receipt] = [r for r in store.receipts() if r["result"] == "committed"]
        assert receipt["approval_id"] == needed.value.request_id
