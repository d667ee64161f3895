"""``ctrlrun policy``: the effect-key template each action's keys are reserved under, and an
operator's acceptance of a change to it (docs/policy.md, "Changing an effect-key template")."""

from __future__ import annotations

import click

from ctrlrun.cli.common import (
    CLI_PERSON,
    Refusal,
    existing_store,
    instant,
    json_line,
    say,
    store_url_option,
    table,
    when,
)
from ctrlrun.cli.replay import replay
from ctrlrun.config import load_policy_file
from ctrlrun.runtime.locate import policy_path
from ctrlrun.store.templates import accept_effect_template, effect_templates


@click.group("policy")
def policy_group() -> None:
    """The effect-key templates the store remembers, and accepting a change to one."""


@policy_group.command("templates")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per action.")
@store_url_option
def templates(as_json: bool, store_url: str | None) -> None:
    """Each action's remembered effect-key template: who recorded it, and when."""
    with existing_store(store_url) as store:
        found = effect_templates(store)
    if as_json:
        for t in found:
            json_line(
                {
                    "action": t.action,
                    "template": t.template,
                    "recorded_at": instant(t.recorded_at),
                    "accepted_by": t.accepted_by,
                }
            )
        return
    if not found:
        say("no effect-key templates yet (the first call that reserves a key records one)")
        return
    rows = [
        (t.action, t.template, t.accepted_by or "(first call)", when(t.recorded_at)) for t in found
    ]
    table(rows, header=("ACTION", "TEMPLATE", "BY", "SINCE"))


@policy_group.command("accept")
@click.argument("action")
@click.option(
    "--template",
    metavar="TEMPLATE",
    help="The template to accept (default: the action's `effect` in the policy file).",
)
@click.option("--policy", "policy", metavar="PATH", help="The policy file (ctrlrun.yaml).")
@store_url_option
def accept(action: str, template: str | None, policy: str | None, store_url: str | None) -> None:
    """Make ACTION's keys be reserved under a new template from now on, as cli:local.

    Keys already reserved under the old template are not carried over: a call that repeats
    an effect under its new key runs again. Accept only once no run under the old keys can
    be repeated (docs/policy.md).
    """
    chosen = template if template is not None else _policy_template(action, policy)
    with existing_store(store_url, writing=True) as store:
        previous = accept_effect_template(store, action, chosen, by=CLI_PERSON)
    say(f"accepted {chosen} for {action} (was {previous or 'none'}), as {CLI_PERSON}")


def _policy_template(action: str, policy: str | None) -> str:
    path = policy_path(policy)
    if not path.is_file():
        raise Refusal(f"no policy file at {path.absolute()}: give --template or --policy")
    entry = load_policy_file(path).entry(action)
    if entry is None or entry.effect is None:
        raise Refusal(f"the policy {path} gives {action} no effect template: give --template")
    return entry.effect.source


policy_group.add_command(replay)
