"""The ``StateStore`` contract both backends implement, and the requests it takes.

A protected call's happy path costs exactly two write transactions: ``start_action`` (consume
the approval, reserve the effect, append the events) and ``finish_action`` (record the outcome,
chain the receipt, append the events). Every refusal is raised after the transaction rolled back,
except the two *kept writes* (an expired lease becomes AMBIGUOUS; an expired approval becomes
EXPIRED), which commit before the refusal is raised. Reads never transition anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeVar, runtime_checkable

from ctrlrun.kernel.approval import ApprovalRecord, ApprovalRequestDraft, ApprovalStatus
from ctrlrun.kernel.budget import BudgetCharge, BudgetState
from ctrlrun.kernel.effect import EffectRecord, EffectState, Reservation
from ctrlrun.kernel.event import Event, EventDraft
from ctrlrun.kernel.evidence_check import Checkpointed
from ctrlrun.kernel.notify import Notice, NotifyTarget
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.receipt import ChainHead, ChainReport, Receipt
from ctrlrun.store.ops import Txn

T = TypeVar("T")


@runtime_checkable
class DriverTxn(Txn, Protocol):
    """A write transaction that also hands out its driver connection, for parts that run a
    caller's own SQL inside it (durable database steps). Both stores' transactions are one.

    What is written through ``connection`` commits or rolls back with the transaction; the
    caller must not commit, roll back or close it. On Postgres it is an autocommit psycopg
    connection inside an explicit ``BEGIN`` (rows as dicts) and every table must be named
    with ``schema`` (``psycopg.sql.Identifier``); on SQLite it is the ``sqlite3`` connection
    inside ``BEGIN IMMEDIATE`` and ``schema`` is None.
    """

    @property
    def connection(self) -> Any:
        """The driver connection this transaction runs on."""
        ...

    @property
    def schema(self) -> str | None:
        """The Postgres schema every statement names; None on SQLite."""
        ...


@dataclass(frozen=True, slots=True)
class StartRequest:
    """Begin an attempt: consume ``approval`` and reserve ``effect_key``, in one transaction.

    ``events`` are appended before the store's own (``APPROVAL_CONSUMED``, ``EFFECT_RESERVED``,
    ``EXECUTION_STARTED``). With ``execute`` the record is written EXECUTING directly; without,
    it stays RESERVED until ``begin_execution``. With ``effect_template`` (the source of the
    template the key was rendered from), the action's remembered template is checked first
    (recorded the first time; another one is refused with ``EffectTemplateChanged``).
    """

    action_id: str
    effect_key: str | None = None
    lease: timedelta = timedelta(minutes=5)
    approval_id: str | None = None
    action_hash: str | None = None
    policy_hash: str | None = None  # the approval must have been requested under it
    max_attempts: int | None = None
    execute: bool = True
    events: tuple[EventDraft, ...] = ()
    action_name: str | None = None
    effect_template: str | None = None  # the key's template: checked against action_name's
    approvals_required: int = 1  # the policy's approval.count, checked against the grants
    approvers_excluded: tuple[str, ...] = ()  # who may not have granted it (the requester)
    approver_keys: Mapping[str, str] | None = None  # signed mode: only verified grants count
    announce_ambiguous: tuple[NotifyTarget, ...] = ()  # told when a lapsed lease is found
    budget: BudgetCharge | None = None  # consumed in this transaction (kernel/budget.py)


@dataclass(frozen=True, slots=True)
class Started:
    """What ``start_action`` granted."""

    reservation: Reservation | None
    approval: ApprovalRecord | None
    budget: BudgetState | None = None  # the budget before and after this call's charge


@dataclass(frozen=True, slots=True)
class FinishRequest:
    """Record an attempt's outcome, its events and its receipt, in one transaction.

    With an ``effect_key`` the record must still be this attempt's and in a live state (or
    already AMBIGUOUS when the outcome is AMBIGUOUS); otherwise the refusal is raised and
    nothing is written. ``notices`` are enqueued in the same transaction.
    """

    action_id: str
    receipt: Mapping[str, Any]
    effect_key: str | None = None
    attempt: int | None = None
    outcome: EffectState | None = None
    result: Any = None
    error: str | None = None
    events: tuple[EventDraft, ...] = ()
    notices: tuple[Notice, ...] = ()  # outbox messages telling of this outcome (AMBIGUOUS)
    give_back_budget: bool = False  # a FAILED budgeted attempt returns its charge


@runtime_checkable
class StateStore(Protocol):
    """Effects, approvals, events and receipts: one contract, two backends."""

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgres"``: which named-query files the store reads."""
        ...

    @property
    def schema(self) -> str | None:
        """The Postgres schema the store lives in (every statement names it); None on SQLite."""
        ...

    @property
    def write_transactions(self) -> int:
        """How many write transactions this handle has committed."""
        ...

    def transact(self, work: Callable[[DriverTxn], T]) -> T:
        """Run ``work`` in one write transaction; kept refusals commit, others roll back."""
        ...

    def read(self, work: Callable[[Txn], T]) -> T:
        """Run ``work`` outside any write transaction; it must only read."""
        ...

    # --- the protected call ---------------------------------------------------------------
    def start_action(self, request: StartRequest) -> Started:
        """Consume and reserve atomically; raise the planner's refusal with nothing written."""
        ...

    def finish_action(self, request: FinishRequest) -> Receipt:
        """Write the outcome, the events and the chained receipt atomically."""
        ...

    def record(
        self, events: tuple[EventDraft, ...], receipt: Mapping[str, Any] | None = None
    ) -> Receipt | None:
        """Append ``events`` and chain ``receipt`` (if any) in one transaction."""
        ...

    def begin_execution(self, effect_key: str, action_id: str, attempt: int) -> EffectRecord:
        """Move this attempt's RESERVED record to EXECUTING."""
        ...

    def resolve_effect(
        self,
        effect_key: str,
        state: EffectState,
        resolver: str,
        *,
        by: str = "human",
        attempt: int | None = None,
        events: tuple[EventDraft, ...] = (),
        reason: str | None = None,
    ) -> EffectRecord:
        """A verdict on an AMBIGUOUS record: COMMITTED or FAILED. ``by`` is ``human`` or
        ``reconcile``; ``resolver`` (who) is kept on the record. With ``attempt``, the verdict
        applies only while the record is still that attempt (else ``InvalidArgument``).
        ``events`` are appended before ``EFFECT_RESOLVED``, in the same transaction; a refused
        resolution writes none of them. ``reason`` (why, in the person's words;
        ``check_reason``) is recorded on the ``EFFECT_RESOLVED`` event."""
        ...

    def get_effect(self, effect_key: str) -> EffectRecord | None:
        """The record, or None. Never transitions it."""
        ...

    def list_effects(self, state: EffectState | None = None) -> tuple[EffectRecord, ...]:
        """Records oldest first, optionally only those in ``state``."""
        ...

    # --- approvals ------------------------------------------------------------------------
    def put_approval_request(
        self, draft: ApprovalRequestDraft, events: tuple[EventDraft, ...] = ()
    ) -> ApprovalRecord:
        """Record a PENDING request (and ``APPROVAL_REQUESTED``), or return the pending,
        unexpired one already made for the identical action under the same policy (with
        ``APPROVAL_REUSED``); ``events`` are appended first either way."""
        ...

    def grant_approval(
        self,
        approval_id: str,
        approver: str,
        signature: str | None = None,
        reason: str | None = None,
    ) -> ApprovalRecord:
        """One more grant by ``approver`` (with its ``signature``, when approvers sign):
        GRANTED once the request has the distinct approvers it needs; refusals per
        ``plan_answer`` and ``plan_grant``. ``reason`` (``check_reason``) is recorded on the
        ``APPROVAL_GRANTED`` event."""
        ...

    def deny_approval(
        self,
        approval_id: str,
        approver: str,
        reason: str | None = None,
        signature: str | None = None,
    ) -> ApprovalRecord:
        """PENDING → DENIED; refusals per ``plan_answer``. ``reason`` (why, in the person's
        words; ``check_reason``) and ``signature`` (when approvers sign, a denial too) are
        recorded on the ``APPROVAL_DENIED`` event."""
        ...

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        """The request and its answer, or None."""
        ...

    def list_approvals(self, status: ApprovalStatus | None = None) -> tuple[ApprovalRecord, ...]:
        """Requests oldest first, optionally only those in ``status``."""
        ...

    # --- evidence -------------------------------------------------------------------------
    def find_approvals(self, action_hash: str, policy_hash: str) -> tuple[ApprovalRecord, ...]:
        """Every request made for the action hashing to ``action_hash`` under
        ``policy_hash``, oldest first (any status)."""
        ...

    def denial_reason(self, approval_id: str) -> str | None:
        """The reason given when ``approval_id`` was denied (its ``APPROVAL_DENIED`` event);
        None if it was not denied or no reason was given."""
        ...

    def events(self, action_id: str | None = None) -> tuple[Event, ...]:
        """Events in append order, optionally only one action's."""
        ...

    def receipts(self, action_id: str | None = None) -> tuple[Receipt, ...]:
        """Receipts in chain order (unchained rows last), optionally only one action's."""
        ...

    @property
    def partitions(self) -> int:
        """How many receipt chains the store keeps, 0..N-1 (fixed when it was created)."""
        ...

    def chain_head(self) -> ChainHead | None:
        """Partition 0's head row (the store's only one with one chain), or None if it is
        missing."""
        ...

    def chain_heads(self) -> tuple[ChainHead | None, ...]:
        """Every partition's head row, 0, 1, … (None where a row is missing)."""
        ...

    def chain_anchor(self) -> ChainHead | None:
        """Where partition 0's stored chain starts after a prune: the checkpointed head the
        oldest remaining receipt links to; None when it starts at genesis (never pruned)."""
        ...

    def chain_anchors(self) -> dict[int, ChainHead]:
        """Where each pruned partition's stored chain starts (absent: genesis)."""
        ...

    def verify_chain(
        self,
        policy: Policy | None = None,
        *,
        checkpoints: Checkpointed = None,
    ) -> ChainReport:
        """Every break of the stored evidence by kind, partition and seq: each receipt chain's,
        walked from its anchor; with ``checkpoints`` (the heads signed checkpoints state per
        partition, or for partition 0 alone; already verified:
        ``ctrlrun.checkpoints.load_checkpoints``) also a cut tail, a rewound
        head, a rewrite before a checkpoint and an unproven anchor
        (``kernel.receipt.verify_chain``); and the approvals its receipts cite, judged under
        ``policy`` when its hash is the receipt's (``kernel.evidence_check``)."""
        ...

    def close(self) -> None:
        """Release every connection. Not a fence: later use reconnects."""
        ...
