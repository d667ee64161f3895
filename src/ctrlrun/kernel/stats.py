"""What ``ctrlrun stats`` counts, decided purely: the rollup key of a receipt, and the report.

A receipt is counted once, in the hour it finished, under its action, agent, rule, decision,
result and reason: the exception type its error names, for a call that did not commit; for an
observed call (``mode: observe``), what enforcement would have done (``would_run`` if
nothing). The report groups those counts by one dimension and adds the approvals (how many
were requested, granted, denied, expired, and how long people took) and the AMBIGUOUS effects
(opened, resolved, still open, and how long they stayed open). Percentiles are nearest-rank.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final, NamedTuple

from ctrlrun._time import decode_instant

_REASON: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,63}):")
_ANSWERED: Final = ("granted", "denied", "consumed")
_OVER_BUDGET: Final = "ActionDenied: over budget:"  # kernel/budget.py over_budget's own words


class Dimension(StrEnum):
    """What the report groups calls by."""

    ACTION = "action"
    AGENT = "agent"
    RULE = "rule"


class StatsKey(NamedTuple):
    """One rollup row's identity: the hour and everything a call is counted under."""

    bucket: datetime
    action: str
    agent: str
    rule: str
    decision: str
    result: str
    reason: str


class RollupKey(NamedTuple):
    """One rollup row's identity: a call counted under one dimension's value (``name``)."""

    bucket: datetime
    dimension: str
    name: str
    decision: str
    result: str
    reason: str


def project(key: StatsKey) -> tuple[RollupKey, ...]:
    """``key`` as one rollup key per dimension: the rollup keeps each dimension apart, so its
    size grows with the values of one dimension at a time, not with their product."""
    return tuple(
        RollupKey(key.bucket, str(d), getattr(key, str(d)), key.decision, key.result, key.reason)
        for d in Dimension
    )


class Opened(NamedTuple):
    """An AMBIGUOUS attempt, and when its receipt was recorded."""

    effect_key: str
    attempt: int
    opened_at: datetime


def stats_key(document: Mapping[str, Any]) -> StatsKey | None:
    """The rollup key of one receipt document; None if it names no finish time."""
    keyed = _keyed(document)
    return keyed[0] if keyed is not None else None


def _keyed(document: Mapping[str, Any]) -> tuple[StatsKey, datetime] | None:
    try:
        finished = decode_instant(str(document.get("finished_at")))
    except ValueError:
        return None
    principal = document.get("principal")
    agent = principal.get("agent") if isinstance(principal, Mapping) else None
    result = str(document.get("result") or "")
    error = document.get("error")
    match = _REASON.match(error) if isinstance(error, str) and result != "committed" else None
    reason = match.group(1) if match else ""
    if reason == "ActionDenied" and str(error).startswith(_OVER_BUDGET):  # a budget's refusal
        reason = "over_budget"
    observed = document.get("observed")
    if result == "observed" and isinstance(observed, Mapping):  # what enforcement would do
        reason = str(observed.get("would_have") or "would_run")
    key = StatsKey(
        hour_of(finished),
        str(document.get("action") or ""),
        str(agent or ""),
        str(document.get("decision_reason") or ""),
        str(document.get("decision") or ""),
        result,
        reason,
    )
    return key, finished


def hour_of(instant: datetime) -> datetime:
    """The start of the hour ``instant`` falls in: the rollup's bucket."""
    return instant.replace(minute=0, second=0, microsecond=0)


def fold_receipts(
    documents: Iterable[Mapping[str, Any]],
) -> tuple[Counter[RollupKey], list[Opened]]:
    """The calls per rollup key in ``documents`` (each counted once per dimension), and the
    AMBIGUOUS attempts among them."""
    counts: Counter[RollupKey] = Counter()
    opened: list[Opened] = []
    for document in documents:
        keyed = _keyed(document)
        if keyed is None:
            continue
        key, finished = keyed
        counts.update(project(key))
        effect_key, attempt = document.get("effect_key"), document.get("attempt")
        if key.result == "ambiguous" and isinstance(effect_key, str) and isinstance(attempt, int):
            opened.append(Opened(effect_key, attempt, finished))
    return counts, opened


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile (0 < p <= 100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class Durations:
    """How many, and the median and 90th percentile of their seconds."""

    count: int
    median_s: float | None
    p90_s: float | None

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Durations:
        """The summary of ``seconds``, to the second (people's time: receipts keep only
        milliseconds, and a person does not answer in them)."""
        median, p90 = percentile(seconds, 50), percentile(seconds, 90)
        return cls(
            len(seconds),
            None if median is None else float(round(median)),
            None if p90 is None else float(round(p90)),
        )


@dataclass(slots=True)
class Group:
    """The calls of one value of the dimension: by result, decision and refusal reason."""

    name: str
    calls: int = 0
    results: Counter[str] = field(default_factory=Counter)
    decisions: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, counters as sorted mappings."""
        return {
            "name": self.name,
            "calls": self.calls,
            "results": dict(sorted(self.results.items())),
            "decisions": dict(sorted(self.decisions.items())),
            "reasons": dict(sorted(self.reasons.items())),
        }


@dataclass(frozen=True, slots=True)
class StatsReport:
    """Everything ``ctrlrun stats`` shows for one window."""

    by: Dimension
    groups: tuple[Group, ...]
    approvals: Mapping[str, int]
    answered: Durations
    ambiguous_opened: int
    ambiguous_resolved: Mapping[str, int]
    ambiguous_open_now: int
    ambiguous_open_for: Durations

    @property
    def calls(self) -> int:
        """All calls in the window."""
        return sum(g.calls for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``--json``)."""
        return {
            "by": str(self.by),
            "calls": self.calls,
            "groups": [g.to_dict() for g in self.groups],
            "approvals": dict(sorted(self.approvals.items())),
            "approval_answer_seconds": _durations(self.answered),
            "ambiguous": {
                "opened": self.ambiguous_opened,
                "resolved": dict(sorted(self.ambiguous_resolved.items())),
                "open_now": self.ambiguous_open_now,
                "open_seconds": _durations(self.ambiguous_open_for),
            },
        }


def _durations(d: Durations) -> dict[str, Any]:
    return {"count": d.count, "median": d.median_s, "p90": d.p90_s}


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    """One approval request as stats reads it."""

    status: str
    created_at: datetime
    expires_at: datetime
    answered_at: datetime | None


@dataclass(frozen=True, slots=True)
class ResolvedRow:
    """One resolved AMBIGUOUS attempt: how it was settled and when it was opened."""

    state: str
    resolved_at: datetime
    opened_at: datetime


def plan_report(
    by: Dimension,
    counts: Iterable[tuple[RollupKey, int]],
    approvals: Iterable[ApprovalRow],
    resolved: Iterable[ResolvedRow],
    *,
    open_now: int,
    now: datetime,
) -> StatsReport:
    """The report from the window's rollup counts (those of ``by`` are read), approval
    requests and resolutions. A
    request still pending past its expiry at ``now`` counts as expired (expiry is recorded
    only when a call meets it)."""
    groups, opened = _grouped(by, counts)
    statuses, answered = _answers(approvals, now)
    settled: Counter[str] = Counter()
    spans: list[float] = []
    for done in resolved:
        settled[done.state] += 1
        spans.append((done.resolved_at - done.opened_at).total_seconds())
    return StatsReport(
        by, groups, statuses, answered, opened, dict(settled), open_now, Durations.of(spans)
    )


def _grouped(
    by: Dimension, counts: Iterable[tuple[RollupKey, int]]
) -> tuple[tuple[Group, ...], int]:
    """The groups, most calls first, and how many of the calls ended AMBIGUOUS."""
    groups: dict[str, Group] = {}
    opened = 0
    for key, calls in counts:
        if key.dimension != by:
            continue
        group = groups.setdefault(key.name, Group(key.name))
        group.calls += calls
        group.results[key.result] += calls
        group.decisions[key.decision] += calls
        if key.reason:
            group.reasons[key.reason] += calls
        opened += calls if key.result == "ambiguous" else 0
    return tuple(sorted(groups.values(), key=lambda g: (-g.calls, g.name))), opened


def _answers(approvals: Iterable[ApprovalRow], now: datetime) -> tuple[dict[str, int], Durations]:
    """Requests per status, and how long the answered ones waited for their answer."""
    statuses: Counter[str] = Counter()
    waits: list[float] = []
    for request in approvals:
        lapsed = request.status == "pending" and request.expires_at <= now
        statuses["expired" if lapsed else request.status] += 1
        if request.answered_at is not None and request.status in _ANSWERED:
            waits.append((request.answered_at - request.created_at).total_seconds())
    return dict(statuses), Durations.of(waits)


class BudgetUse(NamedTuple):
    """What one budget window holds, from the store's row (``budget_spend``)."""

    budget_id: str
    window_start: datetime
    spent: int


def budget_use(
    rows: Iterable[tuple[str, datetime, int]], since: datetime | None
) -> list[BudgetUse]:
    """The windows a report from ``since`` covers (every window without it): those that began
    at or after ``since``, and per budget the latest that began before it (the one ``since``
    fell in: windows tumble, so an older one ended before a later one began)."""
    use = [BudgetUse(*row) for row in rows]
    if since is None:
        return sorted(use)
    current: dict[str, BudgetUse] = {}
    for row in use:
        if row.window_start < since:
            held = current.get(row.budget_id)
            if held is None or row.window_start > held.window_start:
                current[row.budget_id] = row
    return sorted([r for r in use if r.window_start >= since] + list(current.values()))
