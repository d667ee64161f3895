"""``ctrlrun notify``: deliver approval notifications (Standard Webhooks POSTs) from the outbox."""

from __future__ import annotations

import time

import click

from ctrlrun.cli.common import say
from ctrlrun.cli.durable_common import open_operator_store, refusals, store_option


@click.command("notify")
@click.option("--once", is_flag=True, help="Deliver what is due now, then exit.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="Seconds between polls when nothing is due.",
)
@store_option
def notify(once: bool, interval: float, store_url: str | None) -> None:
    """Deliver each new approval request to the webhook targets the policy's `notify:` names,
    signed per Standard Webhooks (secret from the variable each target names). Runs until
    interrupted; at-least-once, with the outbox's backoff and dead state (`ctrlrun outbox`)."""
    from ctrlrun.durable.notify import notification_dispatcher

    with refusals():
        dispatcher = notification_dispatcher(open_operator_store(store_url, writing=True))
        while True:
            deliveries = dispatcher.run_once()
            for delivery in deliveries:
                say(f"{delivery.message_id}  attempt {delivery.attempts}  {delivery.outcome}")
            if once:
                if not deliveries:
                    say("nothing to deliver")
                return
            if not deliveries:
                time.sleep(interval)  # a poll interval, not a wait for something to happen
