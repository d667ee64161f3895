"""The five scenarios of ``ctrlrun demo``, each run for real against a real SQLite store.

Every scenario states what the library must do and checks that it did: a refusal that does not
come, the wrong refusal, or a provider that was called more often than the scenario allows
raises ``DemoFailure``, and the demo exits non-zero instead of printing a pass. The clock is
scripted (``ScenarioClock``), so the evidence does not depend on today's date.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar, cast

from ctrlrun.config import load_policy_text
from ctrlrun.display import command_line
from ctrlrun.errors import (
    AmbiguousEffect,
    ApprovalMismatch,
    ApprovalRequired,
    DuplicateEffect,
    DuplicateState,
    NotExecuted,
)
from ctrlrun.kernel.effect import EffectState
from ctrlrun.runtime.context import context, with_approval
from ctrlrun.runtime.control import Control
from ctrlrun.runtime.protect import protect
from ctrlrun.store.protocol import StateStore
from ctrlrun.store.sqlite import SQLiteStateStore

DEMO_NOW: Final = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
DEMO_POLICY: Final = """\
schema: ctrlrun.policy/v1
actions:
  stripe.refund:
    effect: "refund:{payment_id}"
    rules:
      - when: {amount_gte: 1, amount_lte: 100000}
        decision: allow
      - when: {amount_gte: 100001, amount_lte: 1000000}
        decision: approve
      - decision: deny
"""
POLICY_SUMMARY: Final = (
    "policy: refunds up to €1,000 run, up to €10,000 need a person, anything else is denied"
)
APPROVER: Final = "human:demo"
LOST_REPLY_KEY: Final = "refund:pay_1001"

R = TypeVar("R", bound=BaseException)
Echo = Callable[[str], None]


class DemoFailure(Exception):
    """The library let a scenario through (or refused it for the wrong reason)."""


def as_state_store(store: SQLiteStateStore) -> StateStore:
    """``store`` as the protocol: ``dialect`` is ``Final`` on the class, which mypy reads as
    not matching the protocol's plain attribute although every read of it works."""
    return cast(StateStore, store)


class ScenarioClock:
    """A clock that stands still within a scenario and moves one minute between scenarios:
    deterministic, never lapsing a lease or an approval mid-scenario, and giving each
    scenario's records their own time (so listings order the same way on every run)."""

    def __init__(self) -> None:
        self.now = DEMO_NOW

    def __call__(self) -> datetime:
        return self.now

    def next_scenario(self) -> None:
        self.now += timedelta(minutes=1)


def euros(amount: int) -> str:
    """Minor units as whole euros: ``200000`` → ``€2,000``."""
    return f"€{amount // 100:,}"


class Provider:
    """A fake payment provider that counts the refunds it really made."""

    def __init__(self) -> None:
        self.refunds: list[tuple[str, int]] = []

    def refund(self, payment_id: str, amount: int) -> dict[str, Any]:
        self.refunds.append((payment_id, amount))
        return {"refund": f"re_{len(self.refunds)}", "payment_id": payment_id}


class Stage:
    """One demo run: the policy, the store, the provider of the current scenario, the output."""

    def __init__(self, path: Path, echo: Echo) -> None:
        self.path = path
        self.echo = echo
        self.policy = load_policy_text(DEMO_POLICY)
        self.clock = ScenarioClock()
        # The demo's evidence need not survive a power cut; skipping the fsync per commit
        # keeps the run well under a second. The guarantees shown do not depend on it.
        self.store = SQLiteStateStore(path, clock=self.clock, durability="normal")
        self.control = Control(self.policy, as_state_store(self.store), clock=self.clock)
        self.provider = Provider()

    def heading(self, number: int, title: str) -> None:
        self.provider = Provider()  # "remote calls" counts this scenario's refunds only
        self.clock.next_scenario()
        self.echo("")
        self.echo(f"{number}. {title}")

    def say(self, who: str, text: str) -> None:
        self.echo(f"   {who:<9}{text}")

    def remote_calls(self, expected: int) -> None:
        """Print the provider's count; ``DemoFailure`` unless it is ``expected``."""
        count = len(self.provider.refunds)
        self.echo(f"   remote calls: {count}")
        if count != expected:
            raise DemoFailure(f"the provider refunded {count} time(s), expected {expected}")

    def refund_with(
        self, executor: Callable[[str, int], Any], control: Control | None = None
    ) -> Any:
        """A ``stripe.refund`` protected by ``control`` (default: the stage's) whose body is
        ``executor``."""

        @protect("stripe.refund", control=control or self.control)
        def refund(payment_id: str, amount: int) -> Any:
            return executor(payment_id, amount)

        return refund

    def pays(self, payment_id: str, amount: int) -> Any:
        return self.provider.refund(payment_id, amount)

    def close(self) -> None:
        self.store.close()


def refused(call: Callable[[], Any], expected: type[R], reason: str | None = None) -> R:
    """Run ``call``, which must raise ``expected`` (with ``reason``, if given)."""
    try:
        call()
    except expected as exc:
        got = getattr(exc, "reason", None)
        if reason is not None and str(got) != reason:
            raise DemoFailure(f"refused as {got}, expected {reason}: {exc}") from exc
        return exc
    except Exception as exc:
        raise DemoFailure(f"expected {expected.__name__}, got {type(exc).__name__}: {exc}") from exc
    raise DemoFailure(f"the library let it through; expected {expected.__name__}")


def state_is(stage: Stage, key: str, state: EffectState, attempt: int) -> None:
    """``DemoFailure`` unless ``key`` is recorded in ``state`` at ``attempt``."""
    record = stage.store.get_effect(key)
    found = None if record is None else (record.state, record.attempt)
    if found != (state, attempt):
        raise DemoFailure(f"{key} is {found}, expected ({state}, attempt {attempt})")


def lost_reply(stage: Stage) -> None:
    """1: the provider refunds, the reply is lost; the blind retry is refused."""
    stage.heading(1, "A lost reply after the provider refunded")

    def refund_then_lose_reply(payment_id: str, amount: int) -> None:
        stage.provider.refund(payment_id, amount)
        raise TimeoutError("read timed out after the provider refunded")

    refund = stage.refund_with(refund_then_lose_reply)
    with context(agent="support-bot"):
        lost = partial(refund, payment_id="pay_1001", amount=50_000)
        refused(lost, TimeoutError)
        stage.say("agent", "refunds €500 on pay_1001 → provider refunds → reply lost")
        state_is(stage, LOST_REPLY_KEY, EffectState.AMBIGUOUS, 1)
        stage.say("effect", f"{LOST_REPLY_KEY} is AMBIGUOUS: it may or may not have happened")
        stage.say("agent", "retries the same refund")
        refused(lost, AmbiguousEffect)
    stage.say("BLOCKED", "the refund may already have happened (ambiguous)")
    stage.remote_calls(1)
    hint = command_line("ctrlrun", "resolve", LOST_REPLY_KEY, "--committed")
    stage.say("a person", f"settles it: {hint}")
    stage.say("", "(it happened) or --failed (it did not: the retry then runs as attempt 2)")


def _ask(stage: Stage, refund: Any, payment_id: str, amount: int) -> str:
    """The agent asks; the policy wants a person; the scripted person grants."""
    needed = refused(partial(refund, payment_id=payment_id, amount=amount), ApprovalRequired)
    approval_id = needed.request_id
    stage.say("agent", f"refunds {euros(amount)} on {payment_id} → needs a person: {approval_id}")
    granted = stage.store.grant_approval(approval_id, APPROVER)
    stage.say("human", f"approves exactly that refund ({granted.action_hash[:19]}…)")
    return approval_id


def mutated_approval(stage: Stage) -> None:
    """2: an approval for €2,000 presented for €5,000 is refused as a mismatch."""
    stage.heading(2, "An approval for €2,000 presented for €5,000")
    refund = stage.refund_with(stage.pays)
    with context(agent="support-bot"):
        approval_id = _ask(stage, refund, "pay_2002", 200_000)
        stage.say("agent", f"refunds €5,000 on pay_2002, presenting {approval_id}")
        with with_approval(approval_id):
            more = partial(refund, payment_id="pay_2002", amount=500_000)
            refused(more, ApprovalMismatch, "mismatch")
    stage.say("BLOCKED", "approved ≠ requested (mismatch); the approval is left unused")
    stage.remote_calls(0)


def two_agents(stage: Stage) -> None:
    """3: agent B tries the effect key while agent A's provider call is still running."""
    stage.heading(3, "Two agents, one effect key")
    other = SQLiteStateStore(stage.path, clock=stage.clock, durability="normal")  # B's own
    control_b = Control(stage.policy, as_state_store(other), clock=stage.clock)
    refund_b = stage.refund_with(stage.pays, control_b)
    outcome: list[BaseException | None] = []

    def agent_b() -> None:
        with context(agent="agent-b"):
            try:
                refund_b(payment_id="pay_3003", amount=30_000)
            except BaseException as exc:  # reported by the main thread, never lost
                outcome.append(exc)
            else:
                outcome.append(None)

    def a_calls_the_provider(payment_id: str, amount: int) -> Any:
        stage.say("agent-a", "holds refund:pay_3003 and is waiting on the provider")
        thread = threading.Thread(target=agent_b, name="agent-b")
        thread.start()
        thread.join()  # B's whole attempt happens inside A's provider call
        stage.say("agent-b", "refunds pay_3003 at the same moment")
        return stage.pays(payment_id, amount)

    try:
        with context(agent="agent-a"):
            stage.refund_with(a_calls_the_provider)(payment_id="pay_3003", amount=30_000)
    finally:
        other.close()
    b = outcome[0] if outcome else None
    if not isinstance(b, DuplicateEffect) or b.state is not DuplicateState.IN_PROGRESS:
        raise DemoFailure(f"agent-b was not refused as in progress: {b!r}")
    stage.say("BLOCKED", "agent-b: already in progress (in_progress)")
    state_is(stage, "refund:pay_3003", EffectState.COMMITTED, 1)
    stage.say("agent-a", "committed")
    stage.remote_calls(1)


def replayed_approval(stage: Stage) -> None:
    """4: a spent approval presented again is refused as consumed."""
    stage.heading(4, "An approval replayed")
    refund = stage.refund_with(stage.pays)
    with context(agent="support-bot"):
        approval_id = _ask(stage, refund, "pay_4004", 300_000)
        with with_approval(approval_id):
            refund(payment_id="pay_4004", amount=300_000)
            stage.say("agent", f"refunds with {approval_id} → committed; the approval is spent")
            stage.say("agent", f"presents {approval_id} again")
            again = partial(refund, payment_id="pay_4004", amount=300_000)
            refused(again, ApprovalMismatch, "consumed")
    stage.say("BLOCKED", "single use: the approval is already consumed")
    stage.remote_calls(1)


def not_executed_then_retry(stage: Stage) -> None:
    """5: ``NotExecuted`` records FAILED; the retry runs as attempt 2 and commits."""
    stage.heading(5, "The provider provably did nothing, so a retry may run")
    tries: list[int] = []

    def refused_connection_first(payment_id: str, amount: int) -> Any:
        tries.append(1)
        if len(tries) == 1:
            raise NotExecuted("connection refused: the request never left")
        return stage.pays(payment_id, amount)

    refund = stage.refund_with(refused_connection_first)
    with context(agent="support-bot"):
        refused(partial(refund, payment_id="pay_5005", amount=80_000), NotExecuted)
        stage.say("agent", "refunds €800 on pay_5005 → connection refused (NotExecuted)")
        state_is(stage, "refund:pay_5005", EffectState.FAILED, 1)
        stage.say("effect", "refund:pay_5005 is FAILED at attempt 1: provably not executed")
        stage.say("agent", "retries")
        refund(payment_id="pay_5005", amount=80_000)
    state_is(stage, "refund:pay_5005", EffectState.COMMITTED, 2)
    stage.say("ok", "attempt 2 committed")
    stage.remote_calls(1)


SCENARIOS: Final = (
    lost_reply,
    mutated_approval,
    two_agents,
    replayed_approval,
    not_executed_then_retry,
)


def run_scenarios(path: Path, echo: Echo) -> int:
    """Run the five scenarios against a fresh store at ``path``; the number of receipts.

    Raises ``DemoFailure`` as soon as the library lets one through, or if the resulting
    receipt chain does not verify.
    """
    stage = Stage(path, echo)
    try:
        for number, scenario in enumerate(SCENARIOS, 1):
            try:
                scenario(stage)
            except Exception as exc:  # any surprise is a failed scenario, said as one
                detail = (
                    str(exc) if isinstance(exc, DemoFailure) else f"{type(exc).__name__}: {exc}"
                )
                raise DemoFailure(f"scenario {number} ({scenario.__name__}): {detail}") from exc
        report = stage.store.verify_chain()
    finally:
        stage.close()
    if not report.ok:
        raise DemoFailure(f"the demo's receipt chain does not verify: {report.breaks}")
    return report.total
