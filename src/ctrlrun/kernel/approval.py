"""Approvals: a human's yes or no to one exact action, single use, expiring.

A request is bound to an action hash. A grant authorises exactly that hash, once, until the
request expires. ``plan_consume`` and ``plan_answer`` are the pure checks every store runs
inside its write transaction, in a fixed order.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from ctrlrun._time import display_instant
from ctrlrun.errors import (
    ActionDenied,
    ApprovalMismatch,
    DenyReason,
    InvalidArgument,
    MismatchReason,
    Refused,
)
from ctrlrun.kernel.budget import BudgetCharge
from ctrlrun.kernel.identity import identities, identity_key
from ctrlrun.kernel.notify import NotifyTarget

DEFAULT_APPROVAL_TTL: Final = timedelta(minutes=15)


class ApprovalStatus(StrEnum):
    """Where an approval request stands."""

    PENDING = "pending"
    GRANTED = "granted"
    DENIED = "denied"
    EXPIRED = "expired"
    CONSUMED = "consumed"


@dataclass(frozen=True, slots=True)
class ApprovalRequestDraft:
    """What a caller asks a store to record; the store stamps ``created_at``/``expires_at``."""

    approval_id: str
    action: dict[str, Any]  # the full action, as ``Action.to_dict()``, for the human
    action_hash: str
    policy_hash: str
    ttl: timedelta = DEFAULT_APPROVAL_TTL
    required: int = 1  # distinct approvers whose grants make it GRANTED
    excluded: tuple[str, ...] = ()  # who may not grant it (the requester, when so configured)
    notify: tuple[NotifyTarget, ...] = ()  # told of a new request, in its transaction
    summary: str = ""  # one line for a person, sent to ``notify``
    budget: BudgetCharge | None = None  # the store records the budget's state on the request


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """A stored approval request and its answer."""

    approval_id: str
    action_hash: str
    action: dict[str, Any]
    policy_hash: str
    status: ApprovalStatus
    created_at: datetime
    expires_at: datetime
    approver: str | None = None
    answered_at: datetime | None = None
    consumed_at: datetime | None = None
    consumed_by: str | None = None  # the action_id that spent it
    required: int = 1
    excluded: tuple[str, ...] = ()
    signatures: tuple[tuple[str, str], ...] = ()  # (approver, signature) checked at consumption

    def is_expired(self, now: datetime) -> bool:
        """True once ``now`` is past the request's expiry."""
        return now > self.expires_at


@dataclass(frozen=True, slots=True)
class ApprovalPlan:
    """A check's verdict: proceed (``refusal is None``), or refuse after maybe expiring it."""

    refusal: Refused | None = None
    expire: bool = False  # write the record EXPIRED (kept) before raising ``refusal``


_OK: Final = ApprovalPlan()


def _mismatch(approval_id: str, reason: MismatchReason, detail: str) -> ApprovalMismatch:
    return ApprovalMismatch(
        f"approval {approval_id} {detail}", reason=reason, approval_id=approval_id
    )


def plan_consume(
    record: ApprovalRecord | None,
    *,
    approval_id: str,
    action_hash: str,
    now: datetime,
    policy_hash: str | None = None,
) -> ApprovalPlan:
    """May ``approval_id`` authorise an action hashing to ``action_hash``, decided under
    ``policy_hash`` (when given), now?

    Checked in this order: unknown → mismatch (before status, so a mutated action leaves the
    approval granted for the original) → policy changed (a person approved the action under
    the policy it was requested under; the approval stays granted, unused) → denied
    (``ActionDenied``) → not granted → expired (the record is written EXPIRED before the
    refusal is raised).
    """
    if record is None:
        return ApprovalPlan(_mismatch(approval_id, MismatchReason.UNKNOWN, "is unknown"))
    if record.action_hash != action_hash:
        return ApprovalPlan(
            _mismatch(
                approval_id,
                MismatchReason.MISMATCH,
                f"was granted for {record.action_hash}, not for {action_hash}",
            )
        )
    if policy_hash is not None and record.policy_hash != policy_hash:
        return ApprovalPlan(
            _mismatch(
                approval_id,
                MismatchReason.POLICY_CHANGED,
                f"was requested under policy {record.policy_hash}, and the policy is now"
                f" {policy_hash}: request the approval again",
            )
        )
    if record.status is ApprovalStatus.DENIED:
        return ApprovalPlan(
            ActionDenied(
                f"approval {approval_id} was denied by {record.approver}",
                reason=DenyReason.APPROVAL_DENIED,
            )
        )
    if record.status is not ApprovalStatus.GRANTED:
        reason = MismatchReason(record.status.value)
        return ApprovalPlan(_mismatch(approval_id, reason, f"is {record.status}, not granted"))
    if record.is_expired(now):
        return _expired(record)
    return _OK


def plan_answer(record: ApprovalRecord | None, *, approval_id: str, now: datetime) -> ApprovalPlan:
    """May a human grant or deny ``approval_id`` now? Unknown → not pending → expired."""
    if record is None:
        return ApprovalPlan(_mismatch(approval_id, MismatchReason.UNKNOWN, "is unknown"))
    if record.status is not ApprovalStatus.PENDING:
        reason = (
            MismatchReason.EXPIRED
            if record.status is ApprovalStatus.EXPIRED
            else MismatchReason.ANSWERED
        )
        return ApprovalPlan(
            _mismatch(approval_id, reason, f"is already {record.status}; it cannot be answered")
        )
    if record.is_expired(now):
        return _expired(record)
    return _OK


def _expired(record: ApprovalRecord) -> ApprovalPlan:
    detail = f"expired at {display_instant(record.expires_at)}"
    return ApprovalPlan(
        _mismatch(record.approval_id, MismatchReason.EXPIRED, detail),
        expire=record.status is not ApprovalStatus.EXPIRED,
    )


@dataclass(frozen=True, slots=True)
class Grant:
    """One approver's grant of a request (``signature``: see ``kernel.signing``)."""

    approver: str
    granted_at: datetime
    signature: str | None = None


def requesters(action: dict[str, Any]) -> tuple[str, ...]:
    """The names that asked for ``action`` (its principal's agent and user), which a request
    that must be approved by someone else excludes."""
    principal = action.get("principal") or {}
    return tuple(str(name) for name in (principal.get("agent"), principal.get("user")) if name)


def plan_grant(
    record: ApprovalRecord, grants: Sequence[Grant], *, approver: str
) -> tuple[Refused | None, bool]:
    """May ``approver`` add a grant to pending ``record`` that already has ``grants``? The
    refusal (the requester itself, or a second grant by one approver), else whether this
    grant completes it (GRANTED). Names are compared as identities (``kernel.identity``):
    ``'Support-Bot '`` or a look-alike in another script is the requester ``support-bot``."""
    key = identity_key(approver)
    if key in identities(record.excluded):
        detail = f"cannot be granted by {approver!r}, who asked for it (one identity)"
        return _mismatch(record.approval_id, MismatchReason.REQUESTER, detail), False
    if key in identities(g.approver for g in grants):
        detail = f"was already granted by {approver!r} (one identity): another approver must"
        return _mismatch(record.approval_id, MismatchReason.ANSWERED, detail + " grant it"), False
    return None, len(identities(g.approver for g in grants) | {key}) >= record.required


def plan_quorum(
    approval_id: str, grants: Sequence[Grant], *, required: int, excluded: Sequence[str]
) -> Refused | None:
    """At consumption, under the policy the call runs under: are there ``required`` distinct
    identities among the approvers of ``grants``, none of them an ``excluded`` one? The
    refusal if not (identities as ``kernel.identity`` defines them)."""
    barred = identities(excluded)
    by_requester = sorted({g.approver for g in grants if identity_key(g.approver) in barred})
    if by_requester:
        detail = f"was granted by the requester ({', '.join(by_requester)})"
        return _mismatch(approval_id, MismatchReason.REQUESTER, detail)
    named = identities(g.approver for g in grants)
    if len(named) < required:
        detail = f"has {len(named)} of the {required} distinct approvals it needs"
        return _mismatch(approval_id, MismatchReason.PENDING, detail)
    return None


@dataclass(frozen=True, slots=True)
class Reuse:
    """What an identical call that presents no approval meets: a grant to present (its first
    transaction consumes it), or a denial that denies it; neither: it asks a person."""

    granted: ApprovalRecord | None = None
    denied: ApprovalRecord | None = None


def plan_reuse(records: Iterable[ApprovalRecord], *, now: datetime) -> Reuse:
    """Among the requests made for one action under one policy (oldest first): the oldest
    unexpired grant, else the newest unexpired denial (a person said no to exactly this call
    and it is not asked again until that answer expires), else nothing."""
    live = [r for r in records if not r.is_expired(now)]
    granted = next((r for r in live if r.status is ApprovalStatus.GRANTED), None)
    if granted is not None:
        return Reuse(granted=granted)
    denied = next((r for r in reversed(live) if r.status is ApprovalStatus.DENIED), None)
    return Reuse(denied=denied)


def plan_waiting(records: Iterable[ApprovalRecord], now: datetime) -> ApprovalRecord | None:
    """The oldest pending, unexpired request among ``records``: an identical call returns it
    instead of making another."""
    return next(
        (r for r in records if r.status is ApprovalStatus.PENDING and not r.is_expired(now)),
        None,
    )


MAX_REASON_CHARS: Final = 2000


def check_reason(value: object) -> str | None:
    """A person's reason for an answer (a grant, a denial, a resolution): None, or non-empty
    text of at most ``MAX_REASON_CHARS`` characters (its line breaks are kept: every surface
    escapes what it shows)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"a reason must be non-empty text, got {value!r}")
    if len(value) > MAX_REASON_CHARS:
        raise InvalidArgument(f"a reason is at most {MAX_REASON_CHARS} characters")
    return value


def check_person(value: object, what: str = "approver") -> str:
    """``value`` if it is a usable name: non-empty, one line, no control or format characters."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{what} must be a non-empty string, got {value!r}")
    for char in value:
        if unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp"}:
            raise InvalidArgument(f"{what} must be one line of printable text, got {value!r}")
    return value
