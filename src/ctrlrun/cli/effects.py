"""``ctrlrun effects`` (what each effect key holds) and ``ctrlrun resolve`` (a person's verdict
on an AMBIGUOUS one)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from ctrlrun._time import utc_now
from ctrlrun.cli.common import (
    CLI_PERSON,
    Refusal,
    display_policy,
    existing_store,
    instant,
    json_line,
    person_option,
    reason_option,
    say,
    shorten,
    shown_compact,
    store_url_option,
    table,
    when,
    who,
)
from ctrlrun.kernel.approval import check_person
from ctrlrun.kernel.effect import EffectRecord, EffectState
from ctrlrun.runtime.request_facts import effect_facts

HEADER = (
    "EFFECT KEY",
    "STATE",
    "ATTEMPT",
    "ACTION ID",
    "UPDATED",
    "NOTE",
    "NAME",
    "REQUESTED BY",
    "IDEMPOTENCY TOKEN",
    "ARGUMENTS",
)


def shown_state(record: EffectRecord, now: datetime) -> str:
    """The state as an operator reads it: a live state whose lease has lapsed says so. Only
    the display changes; the record moves when the next attempt finds it."""
    if record.lease_expired(now):
        return f"{record.state} (lease expired)"
    return str(record.state)


def effect_document(record: EffectRecord, now: datetime) -> dict[str, Any]:
    """The ``--json`` form of one effect record (stable field names)."""
    return {
        "effect_key": record.effect_key,
        "state": str(record.state),
        "lease_expired": record.lease_expired(now),
        "attempt": record.attempt,
        "action_id": record.action_id,
        "created_at": instant(record.created_at),
        "updated_at": instant(record.updated_at),
        "lease_expires_at": instant(record.lease_expires_at),
        "resolved_by": record.resolved_by,
        "error": record.error,
        "result": record.result,
    }


def note(record: EffectRecord) -> str:
    """Who resolved it, else what went wrong (shortened)."""
    if record.resolved_by:
        return f"resolved by {record.resolved_by}"
    return shorten(record.error) if record.error else ""


@click.command()
@click.option(
    "--status",
    "state",
    type=click.Choice([str(state) for state in EffectState]),
    help="Only effects in this state.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document per line.")
@store_url_option
def effects(state: str | None, as_json: bool, store_url: str | None) -> None:
    """What each effect key holds, oldest first, with what to check with the provider: the
    action, who asked, its arguments and the idempotency token the attempt gave the provider.

    A reserved or executing key whose lease has lapsed shows as `executing (lease expired)`:
    its outcome is unknown, and the next attempt on it will record it AMBIGUOUS. Reading
    changes nothing.
    """
    policy = display_policy()
    with existing_store(store_url) as store:
        records = store.list_effects(EffectState(state) if state else None)
        facts = {r.effect_key: effect_facts(store, r, policy) for r in records}
    now = utc_now()
    if as_json:
        for record in records:
            json_line(effect_document(record, now) | facts[record.effect_key].document())
        return
    if not records:
        click.echo(f"no {state} effects" if state else "no effects yet")
        return
    rows = [
        (
            r.effect_key,
            shown_state(r, now),
            str(r.attempt),
            r.action_id,
            when(r.updated_at),
            note(r),
            facts[r.effect_key].action or "-",
            who(facts[r.effect_key].principal),
            facts[r.effect_key].token,
            shown_compact(facts[r.effect_key].arguments, facts[r.effect_key].shown),
        )
        for r in records
    ]
    table(rows, header=HEADER, color_column=1)


@click.command()
@click.argument("key")
@click.option("--committed", is_flag=True, help="It happened: a retry stays refused.")
@click.option("--failed", is_flag=True, help="It did not happen: a retry runs as the next attempt.")
@person_option(default=CLI_PERSON)
@reason_option
@store_url_option
def resolve(  # noqa: PLR0917 - click passes one argument per option
    key: str,
    committed: bool,
    failed: bool,
    person: str,
    reason: str | None,
    store_url: str | None,
) -> None:
    """Settle the AMBIGUOUS effect KEY once you know what the remote did.

    Give exactly one of --committed and --failed. Recorded as resolved by --as NAME
    ($CTRLRUN_AS; default cli:local), with --reason TEXT, on an EFFECT_RESOLVED event. Any
    other state is refused (exit 1) and nothing is written.
    """
    if committed == failed:
        raise click.UsageError("give exactly one of --committed and --failed")
    target = EffectState.COMMITTED if committed else EffectState.FAILED
    check_person(person, "--as")
    with existing_store(store_url, writing=True) as store:
        record = store.get_effect(key)
        if record is not None and record.lease_expired(utc_now()):
            raise Refusal(
                f"effect {key!r} is {shown_state(record, utc_now())}, not ambiguous: the next"
                " attempt on it will record it AMBIGUOUS; resolve it then"
            )
        resolved = store.resolve_effect(key, target, person, reason=reason)
    say(f"{key} resolved {resolved.state} by {person}" + (f": {reason}" if reason else ""))
    if target is EffectState.FAILED:
        click.echo(f"a retry is now allowed, as attempt {resolved.attempt + 1}")
    else:
        click.echo("a retry will be refused as a duplicate")
