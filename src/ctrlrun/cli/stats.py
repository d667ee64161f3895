"""``ctrlrun stats``: what the agents did in a window, counted.

Calls by decision and result, refusals by reason, approval requests by status with how long
people took, and AMBIGUOUS effects opened, resolved and still open with how long they stayed
open; grouped by action, agent or rule. Reads the store's rollup of receipts, which this command
first brings up to date (it writes only the rollup: docs/rollout.md); with ``--no-refresh``
the store is opened read-only and the receipts the rollup has not reached are counted in
memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import click

from ctrlrun._time import display_instant, encode_instant
from ctrlrun.cli.common import existing_store, json_line, say, store_url_option, table
from ctrlrun.cli.window import parse_since, since_option
from ctrlrun.kernel.stats import Dimension, Durations, StatsReport, budget_use, plan_report
from ctrlrun.store.budgets import budget_spend
from ctrlrun.store.stats import gather_stats, refresh_stats

_ORDER = ("committed", "failed", "ambiguous", "denied", "blocked", "observed")


@click.command("stats")
@since_option
@click.option(
    "--by",
    type=click.Choice([str(d) for d in Dimension]),
    default=str(Dimension.ACTION),
    show_default=True,
    help="Group the calls by this.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
@click.option(
    "--no-refresh",
    is_flag=True,
    help="Open the store read-only; count receipts the rollup has not reached in memory.",
)
@store_url_option
def stats(
    since: str | None, by: str, as_json: bool, no_refresh: bool, store_url: str | None
) -> None:
    """What the agents did, counted: calls, refusals, approvals, AMBIGUOUS effects."""
    now = datetime.now(UTC)
    start = parse_since(since, now) if since is not None else None
    with existing_store(store_url, writing=not no_refresh) as store:
        if not no_refresh:
            refresh_stats(store)
        window = gather_stats(store, start, Dimension(by))
        budgets = budget_use(budget_spend(store), start)
    report = plan_report(
        Dimension(by),
        window.counts,
        window.approvals,
        window.resolved,
        open_now=window.open_now,
        now=now,
    )
    if as_json:
        json_line(
            {
                **report.to_dict(),
                "budgets": [
                    {"budget_id": b, "window_start": encode_instant(w), "spent": n}
                    for b, w, n in budgets
                ],
            }
        )
        return
    _print(report)
    for b, w, n in budgets:  # spend per budget and window, from the store's rows
        say(f"budget       {b}: {n} spent in the window from {display_instant(w)}")


def _print(report: StatsReport) -> None:
    if not report.calls and not report.approvals and not report.ambiguous_open_now:
        say("nothing recorded in this window")
        return
    rows = [
        (
            g.name or "-",
            str(g.calls),
            *(str(g.results.get(r, 0)) for r in _ORDER),
            _counted(g.reasons),
        )
        for g in report.groups
    ]
    header = (
        str(report.by).upper(),
        "CALLS",
        *(r.upper() for r in _ORDER),
        "REASONS",
    )
    table(rows, header=header)
    say()
    requested = sum(report.approvals.values())
    say(
        f"approvals    {requested} requested"
        + (f": {_counted(report.approvals)}" if requested else "")
    )
    say(f"answered in  {_durations(report.answered)}")
    resolved = _counted(report.ambiguous_resolved) or "none resolved"
    say(
        f"ambiguous    {report.ambiguous_opened} opened, {resolved},"
        f" {report.ambiguous_open_now} open now"
    )
    say(f"open for     {_durations(report.ambiguous_open_for)}")


def _counted(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))


def _durations(d: Durations) -> str:
    if not d.count:
        return "-"
    return f"median {_span(d.median_s)}, p90 {_span(d.p90_s)} ({d.count})"


def _span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
