"""``ctrlrun notify``: deliver notifications (Standard Webhooks POSTs) from the outbox, to the
targets the policy names."""

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
@click.option(
    "--console-url",
    envvar="CTRLRUN_CONSOLE_URL",
    metavar="URL",
    help="The ctrlrun console's address (or $CTRLRUN_CONSOLE_URL): each body links to it.",
)
@store_option
def notify(once: bool, interval: float, console_url: str | None, store_url: str | None) -> None:
    """Deliver each new approval request and AMBIGUOUS effect to the webhook targets the
    policy's `notify:` names (read again at every delivery: URL, format and secret come from
    the policy, never from the store), signed per Standard Webhooks. Prints each delivery's
    webhook-id, the id the receiver sees. Runs until interrupted; at-least-once, with the
    outbox's backoff and dead state (`ctrlrun outbox`)."""
    from ctrlrun.config import load_policy_file
    from ctrlrun.durable.notify import notification_dispatcher
    from ctrlrun.runtime.locate import policy_path

    with refusals():
        policy = policy_path()
        load_policy_file(policy)  # a policy that does not load is refused before anything
        dispatcher = notification_dispatcher(
            open_operator_store(store_url, writing=True),
            targets=lambda: load_policy_file(policy),
            console_url=console_url,
        )
        while True:
            deliveries = dispatcher.run_once()
            for d in deliveries:
                error = f"  {d.error}" if d.error else ""
                line = f"{d.message_id}  webhook-id {d.token}  attempt {d.attempts}  {d.outcome}"
                say(line + error)
            if once:
                if not deliveries:
                    say("nothing to deliver")
                return
            if not deliveries:
                time.sleep(interval)  # a poll interval, not a wait for something to happen
