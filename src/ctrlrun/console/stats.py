"""The stats page: ``ctrlrun stats`` for a window, as small server-rendered SVG charts.

The figures are the CLI's (``store.stats``, ``kernel.stats``); this module only lays them out:
one stacked bar per group (calls by result), bars for approval requests by status, for
AMBIGUOUS effects and for what each budget window holds. Every label is escaped by the
template; no script draws anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ctrlrun._time import display_instant
from ctrlrun.console.render import page
from ctrlrun.kernel.stats import BudgetUse, Dimension, StatsReport, budget_use, plan_report
from ctrlrun.store.budgets import budget_spend
from ctrlrun.store.stats import gather_stats, refresh_stats

RESULTS: Final = ("committed", "failed", "ambiguous", "denied", "blocked", "observed")
WINDOWS: Final = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
WIDTH: Final = 480


@dataclass(frozen=True, slots=True)
class Segment:
    """One part of a bar: what it counts, how many, and where it is drawn."""

    label: str
    count: int
    x: float
    width: float


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: its label, its total and its segments."""

    label: str
    total: int
    segments: tuple[Segment, ...]


def stacked(rows: list[tuple[str, Mapping[str, int]]], order: tuple[str, ...]) -> list[Bar]:
    """A bar per row, its segments in ``order``, all bars on one scale (the longest fills
    ``WIDTH``)."""
    longest = max((sum(parts.values()) for _, parts in rows), default=0) or 1
    bars = []
    for label, parts in rows:
        x, segments = 0.0, []
        for name in order:
            count = parts.get(name, 0)
            if count:
                width = WIDTH * count / longest
                segments.append(Segment(name, count, round(x, 1), round(width, 1)))
                x += width
        bars.append(Bar(label, sum(parts.values()), tuple(segments)))
    return bars


def singles(counts: Mapping[str, int]) -> list[Bar]:
    """One single-segment bar per count, on one scale."""
    return stacked([(name, {name: n}) for name, n in counts.items()], tuple(counts))


def budget_rows(use: list[BudgetUse]) -> dict[str, Any]:
    """Spend per budget window: a bar each (one scale) and the rows of the table under it."""
    bars = stacked([(u.budget_id, {"spent": u.spent}) for u in use], ("spent",))
    rows = [(u.budget_id, display_instant(u.window_start), u.spent) for u in use]
    return {"budget_bars": bars, "budget_rows": rows}


def charts(report: StatsReport) -> dict[str, Any]:
    """What the template draws."""
    calls = stacked([(g.name or "-", g.results) for g in report.groups], RESULTS)
    ambiguous = {
        "opened": report.ambiguous_opened,
        "resolved": sum(report.ambiguous_resolved.values()),
        "open now": report.ambiguous_open_now,
    }
    return {
        "calls": calls,
        "approvals": singles(dict(sorted(report.approvals.items()))),
        "ambiguous": singles(ambiguous),
        "results": RESULTS,
    }


def routes(store: Any) -> list[Route]:
    """The stats page over ``store``."""

    async def stats(request: Request) -> Response:
        window = request.query_params.get("since", "7d")
        if window not in WINDOWS:
            window = "7d"
        by = request.query_params.get("by", "action")
        dimension = Dimension(by) if by in set(Dimension) else Dimension.ACTION
        now = datetime.now(UTC)
        await run_in_threadpool(refresh_stats, store)
        since = now - WINDOWS[window]
        found = await run_in_threadpool(gather_stats, store, since, dimension)
        spend = await run_in_threadpool(budget_spend, store)
        report = plan_report(
            dimension, found.counts, found.approvals, found.resolved,
            open_now=found.open_now, now=now,
        )  # fmt: skip
        return page(
            request, "stats.html", report=report, window=window, windows=tuple(WINDOWS),
            by=str(dimension), dimensions=[str(d) for d in Dimension], width=WIDTH,
            **charts(report), **budget_rows(budget_use(spend, since)),
        )  # fmt: skip

    return [Route("/stats", stats)]
