"""The outbox dispatcher: claim a batch, deliver each message, settle each under its fence.

Delivery is **at-least-once** by default: a delivery whose outcome is unknown (the handler
raised anything but ``NotExecuted``, or the worker died and its lease lapsed) is sent again
after the backoff, and the handler gets the message's stable ``token`` to pass to a provider
that deduplicates on it. A topic configured ``on_unknown="park"`` is **at-most-once** instead:
an unknown outcome parks the message ``ambiguous`` for reconciliation and it is never re-sent
until ``Outbox.resolve`` says so.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ctrlrun._time import check_positive
from ctrlrun.canonical import new_id
from ctrlrun.durable.base import DurableStore, check_positive_int
from ctrlrun.durable.outbox import claim_in_txn, settle_in_txn
from ctrlrun.errors import ClaimLost, InvalidArgument, NotExecuted, Undeliverable
from ctrlrun.kernel.outbox import (
    Backoff,
    Message,
    MessageStatus,
    OnUnknown,
    Outcome,
    plan_settlement,
)
from ctrlrun.runtime.receipts import describe
from ctrlrun.store.ops import Txn

log = logging.getLogger("ctrlrun.durable")

Handler = Callable[[Message], Any]
"""Delivers one message. Return: sent. ``NotExecuted``: retry. ``Undeliverable``: failed.
Anything else: unknown (retried, or parked on a parking topic)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one delivery attempt came to. ``status`` is None when the settle was fenced out:
    the claim had been reclaimed, and the row is the new owner's."""

    message_id: str
    attempts: int
    outcome: Outcome
    status: MessageStatus | None
    error: str | None = None
    token: str = ""  # the message's stable token: the webhook-id a receiver sees

    @property
    def fenced(self) -> bool:
        """True when this worker's settle was refused because it no longer held the claim."""
        return self.status is None


class Dispatcher:
    """Claims and delivers outbox messages of ``topics`` (all topics if None) from ``store``.

    ``batch`` messages per claim; ``lease`` per claim; ``max_attempts`` claims before DEAD;
    ``backoff`` spaces retries, ``jitter()`` (a fraction in [0, 1], injectable) spreads them;
    ``on_unknown`` is ``"retry"``/``"park"`` for every topic, or a mapping per topic (topics it
    does not name retry). Configure a topic the same way in every dispatcher.
    """

    def __init__(
        self,
        store: DurableStore,
        handler: Handler,
        *,
        topics: Iterable[str] | None = None,
        batch: int = 10,
        lease: timedelta = timedelta(minutes=5),
        max_attempts: int = 5,
        backoff: Backoff | None = None,
        jitter: Callable[[], float] = random.random,
        on_unknown: str | Mapping[str, str] = OnUnknown.RETRY,
        worker: str | None = None,
    ) -> None:
        self.store = store
        self.handler = handler
        self.topics = None if topics is None else tuple(topics)
        self.batch = check_positive_int(batch, "batch")
        self.lease = check_positive(lease, "lease")
        self.max_attempts = check_positive_int(max_attempts, "max_attempts")
        self.backoff = backoff or Backoff()
        self.jitter = jitter
        self.worker = worker or new_id("wrk")
        if isinstance(on_unknown, str):
            self._default = OnUnknown(on_unknown)
            self._per_topic: dict[str, OnUnknown] = {}
        else:
            self._default = OnUnknown.RETRY
            self._per_topic = {topic: OnUnknown(value) for topic, value in on_unknown.items()}
        if self.topics is not None and not self.topics:
            raise InvalidArgument("topics must name at least one topic, or be None for all")

    def on_unknown(self, topic: str) -> OnUnknown:
        """What this dispatcher does with an unknown outcome on ``topic``."""
        return self._per_topic.get(topic, self._default)

    def run_once(self) -> tuple[Delivery, ...]:
        """Claim one batch and deliver it; the deliveries in claim order."""
        return tuple(self.deliver(message) for message in self.claim())

    def claim(self) -> tuple[Message, ...]:
        """Reclaim lapsed claims and claim a batch, in one write transaction."""

        def work(txn: Txn) -> tuple[Message, ...]:
            return claim_in_txn(
                txn,
                worker=self.worker,
                topics=self.topics,
                batch=self.batch,
                lease=self.lease,
                max_attempts=self.max_attempts,
                on_unknown=self._per_topic,
                default_unknown=self._default,
            )

        return self.store.transact(work)

    def deliver(self, message: Message) -> Delivery:
        """Call the handler on a message this worker claimed, then settle it under its fence.

        A ``BaseException`` (not ``Exception``) is settled as unknown and re-raised.
        """
        try:
            self.handler(message)
        except Undeliverable as exc:
            return self.settle(message, Outcome.REJECTED, describe(exc))
        except NotExecuted as exc:
            return self.settle(message, Outcome.NOT_EXECUTED, describe(exc))
        except Exception as exc:
            return self.settle(message, Outcome.UNKNOWN, describe(exc))
        except BaseException as exc:
            self.settle(message, Outcome.UNKNOWN, describe(exc))
            raise
        return self.settle(message, Outcome.SENT, None)

    def settle(self, message: Message, outcome: Outcome, error: str | None) -> Delivery:
        """Write the outcome of claim ``message.attempts``; a fenced-out write is reported,
        never retried (the row belongs to whoever reclaimed it)."""
        fraction = self.jitter()

        def work(txn: Txn) -> MessageStatus:
            settlement = plan_settlement(
                outcome,
                attempts=message.attempts,
                max_attempts=self.max_attempts,
                on_unknown=self.on_unknown(message.topic),
                backoff=self.backoff,
                fraction=fraction,
                now=txn.now,
                error=error,
            )
            settle_in_txn(txn, message, settlement)
            return settlement.status

        try:
            status = self.store.transact(work)
        except ClaimLost as lost:
            log.warning("ctrlrun: %s (outcome %s not recorded)", lost, outcome)
            return Delivery(
                message.message_id, message.attempts, outcome, None, error, message.token
            )
        return Delivery(message.message_id, message.attempts, outcome, status, error, message.token)
