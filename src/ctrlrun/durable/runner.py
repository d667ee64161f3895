"""Running an approved plan: claim it, run each step under the fence, stop at the first not-ok.

* **Claim**: ``approved → executing`` is one conditional write that bumps ``claim_epoch``.
* **Tamper check**: the stored steps are re-hashed and compared with the approved hash inside
  the claiming transaction and again inside the finishing one, once each per run. Every step
  runs from the copy the claim verified, never from a later read of the row.
* **Fence**: every step transaction starts with the conditional heartbeat write on the plan
  row (``executing`` under exactly this worker's claim epoch) and refuses (``ClaimLost``)
  unless its row count is 1; that write also takes the row's lock. The step's receipt
  (primary key ``(plan_id, step_index)``), its hash-chained receipt and the heartbeat renewal
  commit in that same transaction. Per step the work is independent of the plan's length:
  only the fenced claim holder can add step receipts, so the run reads them once (after its
  claim) and tracks its own.
* **Database steps** run *inside* that transaction and are handed it, so their writes and
  their receipt commit together: exactly once per step position.
* **External steps** run through the effect kernel (``Control``) with their own effect key
  (the policy's template, else ``plan:<plan_id>:<index>``), between a fenced heartbeat and a
  fenced receipt. An unknown outcome is AMBIGUOUS and is never executed again by a resume: a
  resume finds the effect key ``ambiguous`` (or lapsed) and records the step AMBIGUOUS.
* **Resume and repeat**: steps with receipts are skipped; a terminal plan answers from its
  receipts and runs nothing. No cross-step rollback: compensation is a new plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from ctrlrun._time import check_positive, encode_receipt_instant
from ctrlrun.canonical import derived_uuid, new_id
from ctrlrun.durable.base import DurableStore, lease_params, stamp
from ctrlrun.durable.plan_identity import plan_approval_refusal
from ctrlrun.durable.plans import (
    Plans,
    apply_decision_in_txn,
    get_plan_in_txn,
    step_receipt_in_txn,
    step_receipts_in_txn,
)
from ctrlrun.durable.records import step_from_row
from ctrlrun.errors import (
    AmbiguousEffect,
    ClaimLost,
    DuplicateEffect,
    DuplicateState,
    EffectKeyError,
    InvalidArgument,
    NotExecuted,
    PlanReason,
    PlanRefused,
    Refused,
)
from ctrlrun.kernel.action import Action, Principal
from ctrlrun.kernel.evidence_text import result_json
from ctrlrun.kernel.plan import (
    DEFAULT_HEARTBEAT,
    PlanRecord,
    PlanStatus,
    StepRecord,
    StepResult,
    check_integrity,
    plan_claim,
    step_receipt_document,
)
from ctrlrun.kernel.policy import Policy
from ctrlrun.runtime.call import CallSpec
from ctrlrun.runtime.control import Control
from ctrlrun.runtime.normalize import build_action
from ctrlrun.runtime.receipts import describe
from ctrlrun.store.ops import Txn
from ctrlrun.store.ops.evidence import put_receipt_in_txn
from ctrlrun.store.protocol import DriverTxn


@dataclass(frozen=True, slots=True)
class StepContext:
    """What a database step is handed: its identity, its arguments, and the open transaction
    its writes must go through (``connection`` is the driver connection inside it)."""

    plan_id: str
    step_index: int
    action: str
    arguments: dict[str, Any]
    txn: DriverTxn

    @property
    def connection(self) -> Any:
        """The driver connection of the step's transaction (sqlite3, or psycopg with rows as
        dicts): write through it, never commit or roll it back (``DriverTxn``)."""
        return self.txn.connection

    @property
    def schema(self) -> str | None:
        """The Postgres schema to name every table with (``psycopg.sql.Identifier``); None
        on SQLite."""
        return self.txn.schema

    @property
    def token(self) -> str:
        """A stable idempotency token for this step position."""
        return step_token(self.plan_id, self.step_index)


def step_token(plan_id: str, step_index: int) -> str:
    """The deterministic UUID of one step position of one plan."""
    return derived_uuid({"schema": "ctrlrun.plan_step/v1", "plan_id": plan_id, "index": step_index})


class StepKind(StrEnum):
    """Where a step's effect lands."""

    DB = "db"  # inside the step's transaction
    EXTERNAL = "external"  # outside, through the effect kernel


@dataclass(frozen=True, slots=True)
class StepHandler:
    """A registered step: its kind and its function."""

    kind: StepKind
    fn: Callable[..., Any]


class Steps:
    """The registry of what each step action does.

    ``@steps.db("inventory.reserve")`` registers ``fn(ctx: StepContext)``; its return value is
    the step's output. ``@steps.external("stripe.refund")`` registers ``fn(**arguments)``, run
    through ``Control`` (``NotExecuted`` means nothing happened; anything else is unknown).
    """

    def __init__(self) -> None:
        self._handlers: dict[str, StepHandler] = {}

    def db(self, action: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a database step for ``action``."""
        return self._register(action, StepKind.DB)

    def external(self, action: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register an external step for ``action``."""
        return self._register(action, StepKind.EXTERNAL)

    def _register(
        self, action: str, kind: StepKind
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            if action in self._handlers:
                raise InvalidArgument(f"step action {action!r} is registered twice")
            self._handlers[action] = StepHandler(kind, fn)
            return fn

        return decorate

    def get(self, action: str) -> StepHandler | None:
        """The handler for ``action``, if registered."""
        return self._handlers.get(action)


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    """Where a run left the plan: its record, every step receipt, and the positions this call
    executed (empty when it answered from receipts)."""

    plan: PlanRecord
    receipts: tuple[StepRecord, ...]
    ran: tuple[int, ...]

    @property
    def ok(self) -> bool:
        """The plan executed every step."""
        return self.plan.status is PlanStatus.EXECUTED


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """How a step ended, before its receipt is written."""

    result: StepResult
    output: Any = None
    error: str | None = None
    effect_key: str | None = None


class _StepRaised(Exception):
    """A database step's own exception, carried out of its (rolled back) transaction."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class PlanRunner:
    """Runs approved plans of ``store`` with ``steps``; external steps need a ``control``.

    ``heartbeat`` is the per-step lease: a run that stops beating for longer is healed on the
    next read and its claim is fenced out.
    """

    def __init__(
        self,
        store: DurableStore,
        steps: Steps,
        *,
        control: Control | None = None,
        heartbeat: timedelta = DEFAULT_HEARTBEAT,
        worker: str | None = None,
    ) -> None:
        self.store = store
        self.steps = steps
        self.control = control
        self.heartbeat = check_positive(heartbeat, "heartbeat")
        self.worker = worker or new_id("wrk")
        self.plans = Plans(store)

    def run(self, plan_id: str) -> PlanOutcome:
        """Run (or resume) ``plan_id`` to a terminal status, or answer from its receipts.

        Raises ``PlanRefused`` (unknown, not approved, busy, expired, tampered; with a
        ``control`` whose policy names approvers, unsigned; approved by its own requester where
        a step's action says ``distinct_from_requester``) before anything runs,
        ``InvalidArgument`` for a step with no handler, and ``ClaimLost`` if this worker
        was fenced out mid-run (the plan belongs to whoever claimed it since).
        """
        record = self.plans.get(plan_id)
        if record is None:
            raise PlanRefused(
                f"plan {plan_id} is unknown", reason=PlanReason.UNKNOWN, plan_id=plan_id
            )
        if record.terminal:
            return PlanOutcome(record, self.plans.receipts(plan_id), ())
        self._check_handlers(record)
        if self.control is not None:  # who approved, under the policy the steps run under
            refusal = plan_approval_refusal(record, self.control.refresh_policy())
            if refusal is not None:
                raise refusal
        claim = self._claim_in_txn(plan_id)

        def claim_and_read(txn: Txn) -> tuple[PlanRecord, tuple[StepRecord, ...]]:
            return claim(txn), step_receipts_in_txn(txn, plan_id)

        claimed, receipts = self.store.transact(claim_and_read)
        if claimed.terminal:  # it finished between our read and our claim
            return PlanOutcome(claimed, receipts, ())
        # Read once, in the claiming transaction: from here on only this claim can add
        # receipts (the fence), and the loop knows the ones it adds.
        done = {r.step_index: r for r in receipts}
        ran: list[int] = []
        for index in range(len(claimed.steps)):
            receipt = done.get(index)
            if receipt is None:
                receipt = self._run_step(claimed, index)
                ran.append(index)
            if receipt.result is not StepResult.OK:
                error = f"step {index} ({receipt.action}) {receipt.result}: {receipt.error}"
                return self._finish(claimed, PlanStatus.FAILED, error, ran)
        return self._finish(claimed, PlanStatus.EXECUTED, None, ran)

    def _check_handlers(self, record: PlanRecord) -> None:
        for index, step in enumerate(record.steps):
            handler = self.steps.get(step.action)
            if handler is None:
                raise InvalidArgument(
                    f"plan {record.plan_id} step {index}: no handler for {step.action!r}"
                )
            if handler.kind is StepKind.EXTERNAL and self.control is None:
                raise InvalidArgument(
                    f"step {index} ({step.action}) is external: the runner needs a control"
                )

    # --- claim, fence, finish -----------------------------------------------------------------

    def _claim_in_txn(self, plan_id: str) -> Callable[[Txn], PlanRecord]:
        def work(txn: Txn) -> PlanRecord:
            record = get_plan_in_txn(txn, plan_id, lock=True)
            if record is not None and record.terminal:
                return record  # answered from its receipts, never claimed again
            apply_decision_in_txn(txn, record, plan_claim(record, plan_id=plan_id, now=txn.now))
            assert record is not None
            params = stamp(
                txn,
                plan_id=plan_id,
                worker=self.worker,
                epoch=record.claim_epoch,
                plan_hash=record.plan_hash,
                **lease_params(txn, self.heartbeat, "heartbeat_expires_at", "heartbeat_seconds"),
            )
            if txn.run("plan_claim", params) != 1:
                raise PlanRefused(
                    f"plan {plan_id} was claimed concurrently",
                    reason=PlanReason.BUSY,
                    plan_id=plan_id,
                )
            claimed = get_plan_in_txn(txn, plan_id)
            assert claimed is not None
            return claimed

        return work

    def _fence(self, txn: Txn, record: PlanRecord) -> PlanRecord:
        """Lock the plan row; refuse unless it is still ours and its steps still hash right.

        The full check (it parses and re-hashes every stored step): once per run, in the
        finishing transaction, and on the rare paths. A step uses ``_hold``."""
        current = get_plan_in_txn(txn, record.plan_id, lock=True)
        if current is None or not current.held_by(self.worker, record.claim_epoch):
            raise self._not_held(record, current)
        drift = check_integrity(current)
        if drift.refusal is not None:
            raise drift.refusal
        return current

    def _hold(self, txn: Txn, record: PlanRecord, next_step: int) -> None:
        """The per-step fence: renew the heartbeat and move ``next_step`` with one write that
        matches only while the plan is ``executing`` under exactly this claim (row count 1),
        and that locks the plan row to the end of the transaction. Refused: ``ClaimLost``,
        and the transaction (with anything the step wrote) rolls back."""
        params = stamp(
            txn,
            plan_id=record.plan_id,
            next_step=next_step,
            epoch=record.claim_epoch,
            worker=self.worker,
            **lease_params(txn, self.heartbeat, "heartbeat_expires_at", "heartbeat_seconds"),
        )
        if txn.run("plan_advance", params) != 1:
            raise self._not_held(record, get_plan_in_txn(txn, record.plan_id))

    def _not_held(self, record: PlanRecord, current: PlanRecord | None) -> ClaimLost:
        return ClaimLost(
            f"plan {record.plan_id}: claim {record.claim_epoch} by {self.worker} no longer"
            f" holds it ({current.status if current else 'gone'}); nothing written",
            kind="plan",
            target=record.plan_id,
            claim=record.claim_epoch,
        )

    def _finish(
        self, record: PlanRecord, status: PlanStatus, error: str | None, ran: list[int]
    ) -> PlanOutcome:
        def work(txn: Txn) -> PlanOutcome:
            self._fence(txn, record)
            params = stamp(
                txn,
                plan_id=record.plan_id,
                status=str(status),
                error=error,
                epoch=record.claim_epoch,
                worker=self.worker,
            )
            if txn.run("plan_finish", params) != 1:
                raise self._lost(record)
            final = get_plan_in_txn(txn, record.plan_id)
            assert final is not None
            return PlanOutcome(final, step_receipts_in_txn(txn, record.plan_id), tuple(ran))

        return self.store.transact(work)

    def _lost(self, record: PlanRecord) -> ClaimLost:
        return ClaimLost(
            f"plan {record.plan_id}: claim {record.claim_epoch} lost",
            kind="plan",
            target=record.plan_id,
            claim=record.claim_epoch,
        )

    # --- steps ---------------------------------------------------------------------------------

    def _run_step(self, record: PlanRecord, index: int) -> StepRecord:
        handler = self.steps.get(record.steps[index].action)
        assert handler is not None
        if handler.kind is StepKind.DB:
            return self._run_db_step(record, index, handler)
        existing = self.store.transact(lambda txn: self._beat_in_txn(txn, record, index, index))
        if existing is not None:
            return existing
        verdict = self._call_outside(record, index, handler)
        return self.store.transact(lambda txn: self._receipt_in_txn(txn, record, index, verdict))

    def _run_db_step(self, record: PlanRecord, index: int, handler: StepHandler) -> StepRecord:
        step = record.steps[index]

        def work(txn: DriverTxn) -> StepRecord:
            # The fence first (it moves next_step past this step at once: that commits only
            # with the step's writes and receipt). No receipt lookup: ``run`` only runs a
            # position its claim-time read found without one, and only this claim can have
            # added one since; were it otherwise, the receipt's primary key refuses the insert
            # and the step's writes roll back with it.
            self._hold(txn, record, index + 1)
            context = StepContext(
                record.plan_id,
                index,
                step.action,
                json.loads(result_json(step.arguments) or "{}"),
                txn,
            )
            try:
                output = handler.fn(context)
            except Exception as exc:
                raise _StepRaised(exc) from exc
            verdict = StepVerdict(StepResult.OK, output)
            return self._receipt_in_txn(txn, record, index, verdict, held=True)

        try:
            return self.store.transact(work)
        except _StepRaised as raised:  # rolled back: nothing the step wrote was kept
            error = describe(raised.error)
            return self.store.transact(
                lambda txn: self._receipt_in_txn(
                    txn, record, index, StepVerdict(StepResult.FAILED, error=error)
                )
            )

    def _beat_in_txn(
        self, txn: Txn, record: PlanRecord, index: int, next_step: int
    ) -> StepRecord | None:
        """The step's receipt if it has one (after the full fence: a rare path, since the run
        skips the receipts it read); else the per-step fence, moving to ``next_step``."""
        existing = step_receipt_in_txn(txn, record.plan_id, index)
        if existing is not None:
            self._fence(txn, record)
            return existing
        self._hold(txn, record, next_step)
        return None

    def _receipt_in_txn(
        self, txn: Txn, record: PlanRecord, index: int, verdict: StepVerdict, *, held: bool = False
    ) -> StepRecord:
        """The fenced write of one step's receipt, its chained receipt and the heartbeat
        (``held``: this transaction already passed the fence, moving past this step).

        The documents are built from ``record``, the claim's verified copy of the plan."""
        if not held:
            self._hold(txn, record, index + 1)
        result, error, effect_key = verdict.result, verdict.error, verdict.effect_key
        text = result_json(verdict.output)
        receipt_id = new_id("rcp")
        document = step_receipt_document(
            record,
            step_index=index,
            result=result,
            output=None if text is None else json.loads(text),
            error=error,
            effect_key=effect_key,
            receipt_id=receipt_id,
            finished_at=encode_receipt_instant(txn.now),
        )
        put_receipt_in_txn(txn, document)
        params = stamp(
            txn,
            plan_id=record.plan_id,
            step_index=index,
            action=record.steps[index].action,
            result=str(result),
            output_json=text,
            error=error,
            effect_key=effect_key,
            claim_epoch=record.claim_epoch,
            receipt_id=receipt_id,
        )
        written = txn.one("plan_step_insert", params)  # RETURNING: the row as stored
        assert written is not None
        return step_from_row(written, txn.read_ts)

    def _call_outside(self, record: PlanRecord, index: int, handler: StepHandler) -> StepVerdict:
        """Run an external step through the effect kernel; map its outcome to a step result."""
        assert self.control is not None
        step = record.steps[index]
        principal = Principal(record.agent, record.user)
        try:
            policy = self.control.refresh_policy()  # one read builds and decides the step
        except Refused as exc:  # an unloadable policy denies: nothing was executed
            return StepVerdict(StepResult.FAILED, error=describe(exc))
        action = build_action(policy, step.action, dict(step.arguments), principal)
        key = self._effect_key(record, index, action, policy)
        try:
            value, _ = self.control.run(action, handler.fn, CallSpec(effect_key=key), policy=policy)
        except NotExecuted as exc:
            return StepVerdict(StepResult.FAILED, error=describe(exc), effect_key=key)
        except DuplicateEffect as exc:
            if exc.state is DuplicateState.COMMITTED:  # an earlier attempt of this step landed
                effect = self.control.store.get_effect(exc.effect_key)
                output = {"already_committed": True, "result": effect.result if effect else None}
                return StepVerdict(StepResult.OK, output, effect_key=exc.effect_key)
            return StepVerdict(StepResult.AMBIGUOUS, error=describe(exc), effect_key=exc.effect_key)
        except AmbiguousEffect as exc:
            return StepVerdict(StepResult.AMBIGUOUS, error=describe(exc), effect_key=exc.effect_key)
        except Refused as exc:  # denied or needing its own approval: nothing was executed
            return StepVerdict(StepResult.FAILED, error=describe(exc), effect_key=key)
        except Exception as exc:  # the executor's unknown outcome, recorded AMBIGUOUS
            return StepVerdict(StepResult.AMBIGUOUS, error=describe(exc), effect_key=key)
        return StepVerdict(StepResult.OK, value, effect_key=key)

    def _effect_key(
        self, record: PlanRecord, index: int, action: Action, policy: Policy
    ) -> str | None:
        """``policy``'s effect template if the action has one, else the step's position."""
        entry = policy.entry(action.name)
        if entry is None or entry.effect is None:
            return f"plan:{record.plan_id}:{index}"
        try:
            return entry.effect.render(action.arguments, action.resource)
        except EffectKeyError:
            return None  # Control renders it again and records the denial
