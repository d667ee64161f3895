"""Delivering notifications: the outbox messages each new approval request or AMBIGUOUS
effect enqueued, POSTed to the webhook targets they name, signed per Standard Webhooks.

A message names its target and nothing else of it: the URL, the body format and the
variable holding the signing secret come from the **policy** the dispatcher reads at delivery
(``targets``), never from the store, so a store writer can neither redirect a message nor pick
the key that signs it. A target the policy no longer names (or no longer tells of this kind of
event) is not sent: the message is FAILED at once, its error naming the target and the reason
(``NotifyReason``).

At-least-once: ``webhook-id`` is the message's stable token, the same on every attempt, so a
receiver deduplicates on it (and it is the id a delivery reports: ``Delivery.token``); a
delivery whose outcome is unknown (a timeout, a dropped connection, a 5xx) is sent again after
the outbox's backoff, and DEAD after ``max_attempts``. A 4xx other than 408/409/425/429 is a
refusal: FAILED, not retried. The secret is read from the environment at delivery; it is never
stored (unset: the message waits and is tried again).
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

from ctrlrun.display import escape_text
from ctrlrun.durable.base import DurableStore
from ctrlrun.durable.dispatcher import Delivery, Dispatcher
from ctrlrun.errors import (
    InvalidArgument,
    MissingDependency,
    NotExecuted,
    NotifyReason,
    Undeliverable,
)
from ctrlrun.kernel.argument_display import Money
from ctrlrun.kernel.budget import Budget
from ctrlrun.kernel.notify import (
    AMBIGUOUS_TOPIC,
    TOPIC,
    TOPICS,
    NotifyKind,
    NotifyTarget,
    target_name,
)
from ctrlrun.kernel.notify_body import render
from ctrlrun.kernel.outbox import Message
from ctrlrun.kernel.policy import Policy

RETRYABLE: Final = frozenset({408, 409, 425, 429})
TIMEOUT: Final = 10.0
KIND_OF: Final = {TOPIC: NotifyKind.APPROVAL, AMBIGUOUS_TOPIC: NotifyKind.AMBIGUOUS}

log = logging.getLogger("ctrlrun.durable")

Targets = Policy | Iterable[NotifyTarget] | Callable[[], Policy | Iterable[NotifyTarget]]
"""Where the targets come from: a policy, the targets themselves, or a function returning
either, called at each delivery (so an edited policy file is read again)."""


def notification_dispatcher(
    store: DurableStore,
    *,
    targets: Targets,
    console_url: str | None = None,
    lease: timedelta = timedelta(minutes=1),
    max_attempts: int = 8,
    timeout: float = TIMEOUT,
    now: Callable[[], datetime] | None = None,
) -> Dispatcher:
    """A ``Dispatcher`` of notifications on ``store``: ``run_once()`` claims a batch and
    delivers each message to the target of that name in ``targets`` (the policy's
    ``notify:``). ``console_url`` adds a link to the console to every body. ``now`` stamps
    ``webhook-timestamp`` (default: the real clock)."""
    deliver = WebhookPoster(
        targets, console_url=console_url, timeout=timeout, now=now or (lambda: datetime.now(UTC))
    )
    return Dispatcher(store, deliver, topics=TOPICS, lease=lease, max_attempts=max_attempts)


class WebhookPoster:
    """The dispatcher's handler: one signed POST per message, to the target the policy names."""

    def __init__(
        self,
        targets: Targets,
        *,
        console_url: str | None = None,
        timeout: float,
        now: Callable[[], datetime],
    ) -> None:
        self.targets = targets
        self.console_url = console_url
        self.timeout = timeout
        self.now = now

    def current(self) -> Mapping[str, NotifyTarget]:
        """The targets as the policy names them now."""
        found = self.targets() if callable(self.targets) else self.targets
        listed = found.notify if isinstance(found, Policy) else tuple(found)
        return {target.name: target for target in listed}

    def displays(self, event: object) -> dict[str, Money]:
        """How the policy (when the targets come from one) shows the event's action's
        arguments: ``display:``, read at delivery like the targets."""
        found = self.targets() if callable(self.targets) else self.targets
        data = event.get("data") if isinstance(event, dict) else None
        action = data.get("action") if isinstance(data, dict) else None
        name = action.get("name") if isinstance(action, dict) else None
        entry = found.entry(name) if isinstance(found, Policy) and isinstance(name, str) else None
        return entry.displays if entry is not None else {}

    def budget(self, event: object) -> Budget | None:
        """The policy's budget for the event's action when the targets come from the policy
        the request was made under (its hash), so the body can check the recorded one."""
        found = self.targets() if callable(self.targets) else self.targets
        data = event.get("data") if isinstance(event, dict) else None
        if not isinstance(found, Policy) or not isinstance(data, dict):
            return None
        action = data.get("action")
        name = action.get("name") if isinstance(action, dict) else None
        entry = found.entry(name) if isinstance(name, str) else None
        same = found.policy_hash == data.get("policy_hash")
        return entry.budget if entry is not None and same else None

    def __call__(self, message: Message) -> None:
        target = self.resolve(message)
        event = message.payload.get("event")
        try:
            body = render(
                event, target.format, self.console_url, self.displays(event), self.budget(event)
            )
        except InvalidArgument as exc:
            raise Undeliverable(f"{target.name}: {exc.message}") from exc
        data = json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        headers = signed_headers(_secret(target), message.token, self.now(), data)
        log.info("ctrlrun: notify %s webhook-id %s", target.name, message.token)
        request = urllib.request.Request(target.url, data=data, method="POST")  # noqa: S310 - http(s) only: NotifyTarget checks the scheme
        for name, value in {**headers, "content-type": "application/json"}.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                response.read()
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in RETRYABLE:
                raise Undeliverable(f"{target.name}: HTTP {exc.code} refused it") from exc
            raise  # 5xx and the retryable 4xx: unknown, sent again after the backoff

    def resolve(self, message: Message) -> NotifyTarget:
        """The policy's target of the name ``message`` carries, or the refusal (FAILED, named):
        the policy does not name it, or no longer tells it of this kind of event."""
        name = target_name(message.payload)
        target = self.current().get(name) if name is not None else None
        shown = escape_text(repr(name))
        if target is None:
            reason = NotifyReason.UNKNOWN_TARGET
            detail = f"the policy's notify: names no target {shown}"
            raise Undeliverable(f"{detail} ({reason})", reason=reason, target=name)
        kind = KIND_OF.get(message.topic)
        if kind is None or not target.wants(kind):
            reason = NotifyReason.NOT_SUBSCRIBED
            detail = f"target {shown} is not told of {kind or message.topic} events"
            raise Undeliverable(f"{detail} ({reason})", reason=reason, target=name)
        return target


def signed_headers(secret: str, message_id: str, when: datetime, data: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of ``data`` sent as ``message_id`` at ``when``."""
    try:
        from standardwebhooks import Webhook
    except ImportError as exc:
        raise MissingDependency(module="standardwebhooks", extra="notify") from exc
    signature = Webhook(secret).sign(message_id, when, data)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
    }


def _secret(target: NotifyTarget) -> str:
    secret = os.environ.get(target.secret_env, "")
    if not secret:  # nothing was sent: safe to try again once the variable is set
        raise NotExecuted(
            f"{target.name}: ${target.secret_env} is not set, so nothing can be signed"
        )
    return secret


__all__ = ["Delivery", "Targets", "WebhookPoster", "notification_dispatcher", "signed_headers"]
