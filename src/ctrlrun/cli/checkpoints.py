"""``ctrlrun checkpoint`` and ``ctrlrun prune``: the operator's end of the receipt chain.

Both are the operator's, never an agent's: ``checkpoint`` signs with a private key the agents
do not hold, and both write tables a protected call never writes (on Postgres with roles, the
owner role runs them). docs/checkpoints.md says what each proves.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from ctrlrun.cli.common import existing_store, json_line, say, store_url_option, when
from ctrlrun.kernel.checkpoint import DEFAULT_ORIGIN, Checkpoint

F = TypeVar("F", bound=Callable[..., Any])


def proof_options(fn: F) -> F:
    """``--checkpoints FILE``, ``--public-key KEY`` and ``--origin NAME``: the checkpoints a
    verifier (or prune) judges the chain against."""
    fn = click.option(
        "--origin",
        metavar="NAME",
        help="Only the file's checkpoints of this origin (needed when it holds several).",
    )(fn)
    fn = click.option(
        "--public-key",
        "public_key",
        metavar="KEY",
        help="The checkpoint key's public half, ed25519:<base64> (proves every statement).",
    )(fn)
    return click.option(
        "--checkpoints",
        "checkpoints",
        metavar="FILE",
        help="The file `ctrlrun checkpoint --file` appends to (kept outside the store).",
    )(fn)


def proven_checkpoints(
    checkpoints: str | None, public_key: str | None, origin: str | None
) -> tuple[Checkpoint, ...] | None:
    """The file's checkpoints proven by the key; None when neither is given. One without the
    other is a usage error: a checkpoint is worth nothing unproven."""
    if checkpoints is None and public_key is None:
        if origin is not None:
            raise click.UsageError("--origin chooses among --checkpoints; give them too")
        return None
    if checkpoints is None or public_key is None:
        raise click.UsageError("--checkpoints and --public-key go together")
    from ctrlrun.checkpoints import load_checkpoints

    return load_checkpoints(checkpoints, public_key, origin=origin)


def _before(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    """``--before``: an ISO date (midnight UTC) or instant; one without an offset is UTC."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a date: give 2026-12-01 or 2026-12-01T12:00:00Z"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


@click.command("checkpoint")
@click.option(
    "--key",
    "key",
    required=True,
    metavar="FILE",
    help="The Ed25519 private key (PEM) that signs; agents must not be able to read it.",
)
@click.option(
    "--file",
    "file",
    required=True,
    metavar="FILE",
    help="Append the statement here (and verify against the checkpoints already in it).",
)
@click.option("--webhook", metavar="URL", help="Also POST the statement to this URL.")
@click.option(
    "--origin",
    default=DEFAULT_ORIGIN,
    show_default=True,
    metavar="NAME",
    help="Names this store in the statement.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the statement's fields as JSON.")
@store_url_option
def checkpoint(  # noqa: PLR0917 - click passes one argument per option
    key: str, file: str, webhook: str | None, origin: str, as_json: bool, store_url: str | None
) -> None:
    """Sign the receipt chain's head and the time, and append the statement to FILE (and
    --webhook), then to the store.

    The chain is verified first against the checkpoints already in FILE: a chain cut,
    rewound or rewritten since is refused, never signed. Run it on a schedule.
    """
    from ctrlrun.checkpoints import WebhookSink, make_checkpoint
    from ctrlrun.kernel.checkpoint import check_origin

    check_origin(origin)
    sinks = (WebhookSink(webhook),) if webhook else ()
    pem = Path(key).read_bytes()
    with existing_store(store_url, writing=True) as store:
        made = make_checkpoint(store, pem, origin=origin, file=file, sinks=sinks)
    head = made.heads[0]
    if as_json:
        json_line(
            {
                "origin": made.origin,
                "time": made.time,
                "heads": [
                    {"partition": h.partition, "seq": h.seq, "hash": h.hash} for h in made.heads
                ],
                "statement": made.statement,
            }
        )
        return
    places = ", ".join([file, *([webhook] if webhook else []), "the store"])
    say(f"checkpoint {when(made.time)}: partition 0 at seq {head.seq} ({head.hash})")
    if len(made.heads) > 1:
        receipts = sum(h.seq for h in made.heads)
        say(f"and {len(made.heads) - 1} more partitions: {receipts} receipts signed in all")
    say(f"appended to {places}")


@click.command("prune")
@click.option(
    "--before",
    required=True,
    metavar="DATE",
    callback=_before,
    help="Prune up to the newest checkpoint made before DATE (2026-12-01 or an instant).",
)
@proof_options
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@store_url_option
def prune(  # noqa: PLR0917 - click passes one argument per option
    before: datetime,
    checkpoints: str | None,
    public_key: str | None,
    origin: str | None,
    as_json: bool,
    store_url: str | None,
) -> None:
    """Remove the receipts that the newest checkpoint made before DATE covers, and their
    settled events; the chain then verifies from that checkpoint.

    Needs the checkpoint file and its public key: the chain must verify against them first.
    Never removes an effect record, an approval, an event of an open approval or unsettled
    effect, or anything the checkpoint does not cover.
    """
    from ctrlrun.checkpoints import prune as prune_store

    proven = proven_checkpoints(checkpoints, public_key, origin)
    if proven is None:
        raise click.UsageError("prune needs --checkpoints FILE and --public-key KEY")
    with existing_store(store_url, writing=True) as store:
        done = prune_store(store, before, proven)
    if as_json:
        json_line(
            {
                "anchor": {"seq": done.anchor.seq, "hash": done.anchor.hash},
                "receipts": done.receipts,
                "events": done.events,
                "budget_rows": done.budget_rows,
                "checkpoint_time": done.checkpoint.time,
            }
        )
        return
    say(
        f"pruned {done.receipts} receipt(s) and {done.events} event(s): the chain now starts"
        f" after seq {done.anchor.seq}, the checkpoint of {when(done.checkpoint.time)}"
    )
    if done.budget_rows:
        say(f"and {done.budget_rows} row(s) of budget windows that ended before it")
