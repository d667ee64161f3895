"""``ctrlrun grants``: the three roles of a Postgres store, printed or applied (decision 0024)."""

from __future__ import annotations

from collections.abc import Callable

import click

from ctrlrun.cli.common import Refusal, say, store_url_option
from ctrlrun.display import escape_text
from ctrlrun.store.url import redacted


def _role(what: str) -> Callable[[click.Context, click.Parameter, str], str]:
    def check(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
        if escape_text(value) != value:  # printed in the script: only what a terminal shows
            raise click.BadParameter(f"the {what} role's name holds characters a terminal escapes")
        return value

    return check


@click.command()
@store_url_option
@click.option("--agent", required=True, callback=_role("agent"), help="The agent's role.")
@click.option("--approver", required=True, callback=_role("approver"), help="The approver's role.")
@click.option(
    "--apply",
    "apply_",
    is_flag=True,
    help="Migrate the store and grant, as the role the URL names (the owner).",
)
def grants(store_url: str | None, agent: str, approver: str, apply_: bool) -> None:
    """Print (or, with --apply, run) the grants of a Postgres store's three roles.

    The owner (the role --store-url names) alone migrates and owns every table and function.
    The agent's role runs protected calls through the schema's functions only, with no
    INSERT, UPDATE, DELETE, TRUNCATE or CREATE; the approver's role reads what it shows and
    answers through functions of its own. Without --apply nothing is connected to: the script
    is printed for psql. With --apply the store is opened as the owner (created or migrated
    forward) and the script runs in one transaction. Run it again after every upgrade.
    """
    from ctrlrun.cli.common import default_store_url
    from ctrlrun.store import open_store, parse_store_url
    from ctrlrun.store.postgres.roles import Roles, apply_grants

    url = default_store_url() if store_url is None else store_url
    parsed = parse_store_url(url)
    if parsed.kind != "postgres":
        raise Refusal(
            "roles are a Postgres store's: a SQLite file has none, and any process that can"
            " write it can do anything ctrlrun can (docs/postgres.md)"
        )
    roles = Roles(parsed.schema, agent, approver)
    if not apply_:
        click.echo(roles.script(), nl=False)
        return
    open_store(url).close()  # as the owner: creates or migrates forward, never backwards
    owner = apply_grants(parsed.target, roles)
    say(
        f"granted on schema {parsed.schema} of {redacted(url)}, as owner {owner}: agent role"
        f" {agent} (calls through functions only), approver role {approver}"
    )
