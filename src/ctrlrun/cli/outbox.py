"""``ctrlrun outbox``: list and show outbox messages, and settle the ones no worker will move
again (parked AMBIGUOUS, or DEAD) with a person's verdict."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from ctrlrun.cli.common import compact, say, shorten, when
from ctrlrun.cli.durable_common import (
    default_person,
    emit_json,
    open_operator_store,
    refusals,
    store_option,
    table,
)
from ctrlrun.kernel.notify import shown_payload
from ctrlrun.kernel.outbox import Message, MessageStatus

HEADERS = ("MESSAGE", "STATUS", "TOPIC", "ATTEMPTS", "NEXT ATTEMPT", "KEY", "LAST ERROR")
VERDICTS = (MessageStatus.SENT, MessageStatus.FAILED, MessageStatus.PENDING)


@click.group("outbox")
def outbox_group() -> None:
    """Outbox messages: delivered at least once by a dispatcher; a parked (ambiguous) or dead
    one waits for a person's verdict."""


def _outbox(store_url: str | None, *, writing: bool = False) -> Any:
    from ctrlrun.durable.outbox import Outbox

    return Outbox(open_operator_store(store_url, writing=writing))


def message_document(message: Message) -> dict[str, Any]:
    """The ``--json`` form of one message (its idempotency token included; a notification's
    target by name only: ``shown_payload``)."""
    document = {**dataclasses.asdict(message), "token": message.token}
    return {**document, "payload": shown_payload(message.topic, message.payload)}


def _row(message: Message) -> tuple[str, ...]:
    return (
        message.message_id,
        str(message.status),
        message.topic,
        str(message.attempts),
        when(message.next_attempt_at),
        message.dedupe_key or "-",
        shorten(message.last_error) if message.last_error else "-",
    )


@outbox_group.command("list")
@click.option(
    "--status",
    type=click.Choice([str(s) for s in MessageStatus]),
    help="Only messages in this status.",
)
@click.option("--topic", metavar="TOPIC", help="Only messages of this topic.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document per line.")
@store_option
def list_messages(
    status: str | None, topic: str | None, as_json: bool, store_url: str | None
) -> None:
    """Messages, oldest first."""
    with refusals():
        messages = [m for m in _outbox(store_url).list(status) if topic in (None, m.topic)]
    if as_json:
        emit_json(*(message_document(m) for m in messages))
    elif not messages:
        say("no outbox messages" + (f" in status {status}" if status else ""))
    else:
        click.echo(table(HEADERS, [_row(m) for m in messages]))


@outbox_group.command("show")
@click.argument("message_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
@store_option
def show_message(message_id: str, as_json: bool, store_url: str | None) -> None:
    """One message whole: its payload, attempts, lease and last error."""
    from ctrlrun.errors import InvalidArgument

    with refusals():
        message = _outbox(store_url).get(message_id)
        if message is None:
            raise InvalidArgument(f"no outbox message {message_id}")
    if as_json:
        emit_json(message_document(message))
        return
    lines = [
        ("message", message.message_id),
        ("status", str(message.status)),
        ("topic", message.topic),
        ("key", message.dedupe_key or "-"),
        ("token", message.token),
        ("attempts", str(message.attempts)),
        ("next", when(message.next_attempt_at)),
        ("claimed", f"{message.claimed_by or '-'} until {when(message.lease_expires_at)}"),
        ("created", when(message.created_at)),
        ("finished", when(message.finished_at)),
        ("error", message.last_error or "-"),
        ("payload", compact(shown_payload(message.topic, message.payload))),
    ]
    for name, value in lines:
        say(f"{name:<10}{value}")


@outbox_group.command("resolve")
@click.argument("message_id", metavar="ID")
@click.option("--sent", is_flag=True, help="It was delivered: never send it again.")
@click.option("--failed", is_flag=True, help="It was not delivered and must not be.")
@click.option("--pending", is_flag=True, help="Send it again.")
@click.option("--by", "person", help="Who decides (default: $CTRLRUN_USER or the OS user).")
@store_option
def resolve_message(  # noqa: PLR0917 - click passes one argument per option
    message_id: str,
    sent: bool,
    failed: bool,
    pending: bool,
    person: str | None,
    store_url: str | None,
) -> None:
    """Settle a parked (ambiguous) or dead message: give exactly one of --sent, --failed and
    --pending. Any other status is refused (exit 1) and nothing is written."""
    chosen = [s for s, given in zip(VERDICTS, (sent, failed, pending), strict=True) if given]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --sent, --failed and --pending")
    with refusals():
        moved = _outbox(store_url, writing=True).resolve(
            message_id, chosen[0], resolver=person or default_person()
        )
    say(f"{moved.message_id} resolved {moved.status}: {moved.last_error}")
