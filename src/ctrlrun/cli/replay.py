"""``ctrlrun policy replay``: the recorded calls re-decided under a candidate policy, read-only.

Each chained receipt's action (name, canonical arguments, principal, resource, environment) is
rebuilt and evaluated under the candidate; the report says, per action and rule, how many calls
would now be denied, need a person or run, and how many would reserve another effect key or meet
the store's remembered template (``EffectTemplateChanged``) until ``ctrlrun policy accept``.
The receipts are streamed: memory holds the tallies, not the history.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from ctrlrun.cli.common import existing_store, json_line, say, store_url_option, table
from ctrlrun.cli.window import parse_since, since_option
from ctrlrun.config import load_policy_file
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.replay import Change, ReplayGroup, ReplayTally, replay_receipt
from ctrlrun.store.history import receipt_documents
from ctrlrun.store.protocol import StateStore
from ctrlrun.store.templates import effect_templates

_SAYS: dict[Change, str] = {
    Change.UNCHANGED: "same",
    Change.NOW_DENIED: "now DENIED",
    Change.NOW_NEEDS_PERSON: "now NEEDS A PERSON",
    Change.NOW_RUNS: "now RUNS",
    Change.UNREPLAYABLE: "cannot be rebuilt",
}


def replay_policy(
    store: StateStore, candidate: Policy, since: datetime | None = None
) -> ReplayTally:
    """Every chained receipt recorded since ``since`` replayed under ``candidate``, tallied.
    Reads only."""
    remembered = {t.action: t.template for t in effect_templates(store)}
    tally = ReplayTally()
    for document in receipt_documents(store, since):
        tally.add(replay_receipt(document, candidate, remembered))
    return tally


@click.command("replay")
@click.argument("candidate", type=click.Path(dir_okay=False, path_type=Path))
@since_option
@click.option("--json", "as_json", is_flag=True, help="One JSON line per group, then totals.")
@click.option("--all", "show_all", is_flag=True, help="List unchanged groups too.")
@store_url_option
def replay(
    candidate: Path, since: str | None, as_json: bool, show_all: bool, store_url: str | None
) -> None:
    """What CANDIDATE (a policy file) would have decided for the calls already recorded.

    Read-only: nothing is written to the store. Exit 0 whatever would change.
    """
    policy = load_policy_file(candidate)
    start = parse_since(since, datetime.now(UTC)) if since is not None else None
    with existing_store(store_url) as store:
        tally = replay_policy(store, policy, start)
    groups = [g for g in tally.ordered() if show_all or _notable(g)]
    if as_json:
        for group in groups:
            json_line(group.to_dict())
        json_line({"totals": tally.totals()})
        return
    _print(tally, groups)


def _notable(group: ReplayGroup) -> bool:
    return group.change is not Change.UNCHANGED or bool(
        group.keys_changed or group.template_refused
    )


def _print(tally: ReplayTally, groups: list[ReplayGroup]) -> None:
    totals = tally.totals()
    if not tally.calls:
        say("no recorded calls to replay")
        return
    if groups:
        rows = [
            (
                g.action,
                f"{g.old_decision} {g.old_rule}",
                f"{g.new_decision or '-'} {g.new_rule}",
                _SAYS[g.change],
                str(g.calls),
                str(g.keys_changed),
                str(g.template_refused),
            )
            for g in groups
        ]
        header = ("ACTION", "WAS", "WOULD BE", "CHANGE", "CALLS", "NEW KEY", "TEMPLATE")
        table(rows, header=header)
        say()
    say(
        f"{totals['calls']} calls replayed: {totals['unchanged']} same,"
        f" {totals['now_denied']} now denied, {totals['now_needs_person']} now need a person,"
        f" {totals['now_runs']} now run, {totals['unreplayable']} cannot be rebuilt;"
        f" {totals['keys_changed']} would reserve another effect key,"
        f" {totals['template_refused']} would meet a changed template"
        " (ctrlrun policy accept ACTION)"
    )
