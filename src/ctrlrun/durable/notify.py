"""Delivering approval notifications: the outbox messages each new request enqueued, POSTed
to their webhook targets signed per Standard Webhooks.

At-least-once: ``webhook-id`` is the message's stable token, the same on every attempt, so a
receiver deduplicates on it; a delivery whose outcome is unknown (a timeout, a dropped
connection, a 5xx) is sent again after the outbox's backoff, and DEAD after ``max_attempts``.
A 4xx other than 408/409/425/429 is a refusal: FAILED, not retried. The secret is read from
the environment variable the target names, at delivery; it is never stored (unset: the
message waits and is tried again).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ctrlrun.durable.base import DurableStore
from ctrlrun.durable.dispatcher import Delivery, Dispatcher
from ctrlrun.errors import MissingDependency, NotExecuted, Undeliverable
from ctrlrun.kernel.notify import TOPIC, BodyFormat, checked_event, slack_body
from ctrlrun.kernel.outbox import Message

RETRYABLE: Final = frozenset({408, 409, 425, 429})
TIMEOUT: Final = 10.0


def notification_dispatcher(
    store: DurableStore,
    *,
    lease: timedelta = timedelta(minutes=1),
    max_attempts: int = 8,
    timeout: float = TIMEOUT,
    now: Callable[[], datetime] | None = None,
) -> Dispatcher:
    """A ``Dispatcher`` of approval notifications on ``store``: ``run_once()`` claims a batch
    and delivers it. ``now`` stamps ``webhook-timestamp`` (default: the real clock)."""
    deliver = WebhookPoster(timeout=timeout, now=now or (lambda: datetime.now(UTC)))
    return Dispatcher(store, deliver, topics=(TOPIC,), lease=lease, max_attempts=max_attempts)


class WebhookPoster:
    """The dispatcher's handler: one signed POST per message."""

    def __init__(self, *, timeout: float, now: Callable[[], datetime]) -> None:
        self.timeout = timeout
        self.now = now

    def __call__(self, message: Message) -> None:
        target, event = message.payload["target"], message.payload["event"]
        standard = target["format"] == BodyFormat.STANDARD
        body = checked_event(event) if standard else slack_body(event)
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = signed_headers(_secret(target), message.token, self.now(), data)
        request = urllib.request.Request(target["url"], data=data, method="POST")  # noqa: S310 - http(s) only: NotifyTarget checks the scheme
        for name, value in {**headers, "content-type": "application/json"}.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                response.read()
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in RETRYABLE:
                raise Undeliverable(f"{target['name']}: HTTP {exc.code} refused it") from exc
            raise  # 5xx and the retryable 4xx: unknown, sent again after the backoff


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


def _secret(target: dict[str, Any]) -> str:
    secret = os.environ.get(target["secret_env"], "")
    if not secret:  # nothing was sent: safe to try again once the variable is set
        raise NotExecuted(
            f"{target['name']}: ${target['secret_env']} is not set, so nothing can be signed"
        )
    return secret


__all__ = ["Delivery", "WebhookPoster", "notification_dispatcher", "signed_headers"]
