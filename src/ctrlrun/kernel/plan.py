"""Approved plans: a frozen, ordered list of steps a human approves or rejects as a whole.

A plan moves ``pending → approved → executing → executed | failed`` (or ``pending → rejected``,
``pending | approved → expired``). Its hash covers the steps (each a named action with canonical
arguments, identified by its position); the approval binds to that hash, and every claim and
every run's finish re-derives the hash from the stored steps and refuses on drift (the steps
run from the copy the claim verified). The functions here
decide; the store only writes what they return.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from ctrlrun._time import display_instant
from ctrlrun.canonical import canonical_text, digest, is_plain, plain, plain_text
from ctrlrun.errors import InvalidArgument, PlanReason, PlanRefused
from ctrlrun.kernel.action import check_action_name
from ctrlrun.kernel.receipt import ReceiptDraft

PLAN_SCHEMA: Final = "ctrlrun.plan/v1"
STEP_RECEIPT_SCHEMA: Final = "ctrlrun.plan_step/v1"
DEFAULT_PLAN_TTL: Final = timedelta(hours=1)
DEFAULT_HEARTBEAT: Final = timedelta(seconds=120)


class PlanStatus(StrEnum):
    """The stored statuses of a plan."""

    PENDING = "pending"
    APPROVED = "approved"
    EXECUTING = "executing"
    EXECUTED = "executed"
    FAILED = "failed"
    EXPIRED = "expired"
    REJECTED = "rejected"


TERMINAL: Final = frozenset(
    {PlanStatus.EXECUTED, PlanStatus.FAILED, PlanStatus.EXPIRED, PlanStatus.REJECTED}
)


class StepResult(StrEnum):
    """How one step ended. Only ``ok`` lets the plan go on."""

    OK = "ok"
    FAILED = "failed"  # nothing happened (its transaction rolled back, or NotExecuted)
    AMBIGUOUS = "ambiguous"  # an outside effect whose outcome is unknown: never re-run


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step: a dotted action name and its canonical arguments."""

    action: str
    arguments: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The step as it is hashed and stored."""
        return {"action": self.action, "arguments": plain(self.arguments, "arguments")}


def freeze_steps(steps: Iterable[PlanStep | Mapping[str, Any]]) -> tuple[PlanStep, ...]:
    """Validate and copy ``steps`` (``PlanStep`` or ``{"action", "arguments"}``) into a frozen
    tuple; ``InvalidArgument`` for an empty plan, a bad name or non-canonical arguments."""
    frozen: list[PlanStep] = []
    for index, step in enumerate(steps):
        if isinstance(step, PlanStep):
            name, arguments = step.action, step.arguments
        elif isinstance(step, Mapping) and set(step) == {"action", "arguments"}:
            name, arguments = step["action"], step["arguments"]
        else:
            raise InvalidArgument(f"step {index}: expected a PlanStep or {{action, arguments}}")
        if not isinstance(arguments, Mapping):
            raise InvalidArgument(f"step {index}: arguments must be a mapping")
        copied = json.loads(canonical_text(plain(arguments, f"steps[{index}].arguments")))
        frozen.append(PlanStep(check_action_name(name), copied))
    if not frozen:
        raise InvalidArgument("a plan needs at least one step")
    return tuple(frozen)


def plan_hash(steps: Iterable[PlanStep]) -> str:
    """``sha256:<hex>`` over the canonical steps, in order (the positions are part of it)."""
    return digest({"schema": PLAN_SCHEMA, "steps": [step.to_dict() for step in steps]})


def steps_text(steps: Iterable[PlanStep]) -> str:
    """The stored form of the steps: their canonical JSON list."""
    return canonical_text([step.to_dict() for step in steps])


def steps_from_text(text: str) -> tuple[PlanStep, ...]:
    """Inverse of ``steps_text`` (no validation: a drifted row is caught by its hash)."""
    return tuple(PlanStep(item["action"], item["arguments"]) for item in json.loads(text))


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """A stored plan. ``claim_epoch`` increases with every claim; it and ``claimed_by`` are the
    fence every step transaction checks."""

    plan_id: str
    plan_hash: str
    steps: tuple[PlanStep, ...]
    agent: str
    user: str | None
    status: PlanStatus
    created_at: datetime
    expires_at: datetime
    approver: str | None = None
    answered_at: datetime | None = None
    approved_hash: str | None = None
    claim_epoch: int = 0
    claimed_by: str | None = None
    heartbeat_expires_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    next_step: int = 0
    interruptions: int = 0
    error: str | None = None
    approval_signature: str | None = None  # the approver's, when the policy names approvers
    answer_reason: str | None = None  # why the person approved or rejected it, in their words

    @property
    def terminal(self) -> bool:
        """True once nothing can move the plan again."""
        return self.status in TERMINAL

    def heartbeat_lapsed(self, now: datetime) -> bool:
        """An EXECUTING plan whose worker stopped beating before ``now``."""
        return (
            self.status is PlanStatus.EXECUTING
            and self.heartbeat_expires_at is not None
            and now > self.heartbeat_expires_at
        )

    def held_by(self, worker: str, epoch: int) -> bool:
        """The fence: still EXECUTING under exactly this worker's claim."""
        return (
            self.status is PlanStatus.EXECUTING
            and self.claimed_by == worker
            and self.claim_epoch == epoch
        )


@dataclass(frozen=True, slots=True)
class PlanDecision:
    """A check's verdict: go on (``refusal is None``), or refuse after maybe expiring it."""

    refusal: PlanRefused | None = None
    expire: bool = False


_GO: Final = PlanDecision()


def _refuse(plan_id: str, reason: PlanReason, detail: str, status: str | None) -> PlanDecision:
    return PlanDecision(
        PlanRefused(f"plan {plan_id} {detail}", reason=reason, plan_id=plan_id, status=status)
    )


def check_integrity(record: PlanRecord) -> PlanDecision:
    """The stored steps must still hash to the plan's hash (and to the approved one, if any)."""
    actual = plan_hash(record.steps)
    bound = {record.plan_hash} | ({record.approved_hash} if record.approved_hash else set())
    if bound != {actual}:
        return _refuse(
            record.plan_id,
            PlanReason.TAMPERED,
            f"steps hash to {actual}, not to {record.approved_hash or record.plan_hash}",
            str(record.status),
        )
    return _GO


def plan_answer(
    record: PlanRecord | None, *, plan_id: str, presented_hash: str, now: datetime
) -> PlanDecision:
    """May a human approve or reject ``plan_id`` as hashing to ``presented_hash`` now?

    Unknown → hash of the stored steps drifted → presented hash differs → not pending →
    expired (written EXPIRED before the refusal).
    """
    if record is None:
        return _refuse(plan_id, PlanReason.UNKNOWN, "is unknown", None)
    drift = check_integrity(record)
    if drift.refusal is not None:
        return drift
    if presented_hash != record.plan_hash:
        return _refuse(
            plan_id,
            PlanReason.HASH_MISMATCH,
            f"hashes to {record.plan_hash}, not to the presented {presented_hash}",
            str(record.status),
        )
    if record.status is not PlanStatus.PENDING:
        reason = (
            PlanReason.EXPIRED if record.status is PlanStatus.EXPIRED else PlanReason.NOT_PENDING
        )
        return _refuse(plan_id, reason, f"is already {record.status}", str(record.status))
    if now > record.expires_at:
        return _expired(record)
    return _GO


def plan_claim(record: PlanRecord | None, *, plan_id: str, now: datetime) -> PlanDecision:
    """May a worker claim ``plan_id`` (``approved → executing``) now?

    Unknown → drifted → executing (busy) → not approved → never started and past its expiry
    (written EXPIRED). A plan that already started is not expired by the clock: it resumes.
    A terminal plan is not claimed (the caller answers from its receipts).
    """
    if record is None:
        return _refuse(plan_id, PlanReason.UNKNOWN, "is unknown", None)
    drift = check_integrity(record)
    if drift.refusal is not None:
        return drift
    if record.status is PlanStatus.EXECUTING:
        return _refuse(
            plan_id, PlanReason.BUSY, f"is executing under {record.claimed_by}", str(record.status)
        )
    if record.status is not PlanStatus.APPROVED:
        return _refuse(
            plan_id,
            PlanReason.NOT_APPROVED,
            f"is {record.status}, not approved",
            str(record.status),
        )
    if record.started_at is None and now > record.expires_at:
        return _expired(record)
    return _GO


def _expired(record: PlanRecord) -> PlanDecision:
    decision = _refuse(
        record.plan_id,
        PlanReason.EXPIRED,
        f"expired at {display_instant(record.expires_at)}",
        str(PlanStatus.EXPIRED),
    )
    return PlanDecision(decision.refusal, expire=True)


INTERRUPTED_ERROR: Final = (
    "the heartbeat of claim {epoch} by {worker} lapsed at {expiry}; healed for a resume"
)


def step_receipt_document(
    record: PlanRecord,
    *,
    step_index: int,
    result: StepResult,
    output: Any,
    error: str | None,
    effect_key: str | None,
    receipt_id: str,
    finished_at: str,
) -> ReceiptDraft:
    """The chained receipt of one step (the store adds ``seq``/``prev_hash``).

    A ``ReceiptDraft``: its canonical text is composed from parts, not re-validated. Sound
    because ``record``'s steps were verified against the plan's hash when the run claimed it
    (that hash walks every argument through ``plain``), so each step's arguments are plain
    data; the principal is two checked names; ``output`` is what ``result_json`` produced,
    parsed back (plain by construction: it refuses floats and falls back to a ``repr``
    string). A draft that still cannot be composed (a lone surrogate) is encoded through the
    validating path by ``chain_receipt``; the bytes are the same either way.
    """
    step = record.steps[step_index]
    principal = {"agent": record.agent, "user": record.user}
    fields: dict[str, Any] = {
        "schema": STEP_RECEIPT_SCHEMA,
        "receipt_id": receipt_id,
        "action_id": f"{record.plan_id}:{step_index}",
        "plan_id": record.plan_id,
        "plan_hash": record.plan_hash,
        "step_index": step_index,
        "action": step.action,
        "arguments": step.arguments,
        "principal": principal,
        "approver": record.approver,
        "claim_epoch": record.claim_epoch,
        "effect_key": effect_key,
        "result": str(result),
        "output": output,
        "error": error,
        "finished_at": finished_at,
    }
    texts = {"principal": plain_text(principal)}
    if is_plain(step.arguments):
        texts["arguments"] = plain_text(step.arguments)
    else:  # not reachable after a verified claim; the validating encode names the problem
        fields["arguments"] = step.to_dict()["arguments"]
    if is_plain(output):
        texts["output"] = plain_text(output)
    return ReceiptDraft(fields, texts)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """A stored step receipt: one per ``(plan_id, step_index)``, committed in the step's own
    transaction; ``receipt_id`` names its hash-chained receipt."""

    plan_id: str
    step_index: int
    action: str
    result: StepResult
    output: Any
    error: str | None
    effect_key: str | None
    claim_epoch: int
    receipt_id: str
    created_at: datetime
