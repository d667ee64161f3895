"""How far the application's clock is from the database's — observed and reported, never obeyed.

Leases are stamped and judged with the server's clock, so every host judges a lease with one
clock and skew cannot change a lease decision. What skew can still do is make an operator's
reading of the evidence wrong (receipts carry application timestamps), so the store measures
it at open and when a lease is found expired, and reports a divergence beyond the threshold as
a ``CLOCK_SKEW_DETECTED`` event.

One measurement: read the application clock (``t0``), the server's ``clock_timestamp()``
(``s``), the application clock again (``t1``). The server read happened somewhere in between,
so ``skew = midpoint(t0, t1) - s`` is known to within ``bound = |t1 - t0| / 2``; it is reported
only when ``|skew| - bound`` still exceeds the threshold, so latency alone never manufactures a
report.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from ctrlrun._time import check_aware, encode_instant
from ctrlrun.kernel.event import EventDraft, EventType

DEFAULT_THRESHOLD: Final = timedelta(seconds=1)
DEFAULT_INTERVAL: Final = timedelta(minutes=5)  # at most one lease-expiry measurement per this


@dataclass(frozen=True, slots=True)
class ClockSkew:
    """One measurement. ``skew`` is positive when the application clock is ahead."""

    skew: timedelta
    bound: timedelta
    threshold: timedelta
    measured_at: datetime  # the server's clock at the reading
    trigger: str  # "open" | "lease_expired"

    @property
    def exceeded(self) -> bool:
        """True when the skew beyond its own uncertainty is larger than the threshold."""
        return abs(self.skew) - self.bound > self.threshold

    def event(self, action_id: str | None = None, effect_key: str | None = None) -> EventDraft:
        """The ``CLOCK_SKEW_DETECTED`` event describing this measurement."""
        return EventDraft(
            EventType.CLOCK_SKEW_DETECTED,
            action_id,
            effect_key,
            data={
                "skew_us": _micros(self.skew),
                "bound_us": _micros(self.bound),
                "threshold_us": _micros(self.threshold),
                "direction": "ahead" if self.skew > timedelta(0) else "behind",
                "trigger": self.trigger,
                "measured_at": encode_instant(self.measured_at),
            },
        )


def measure(
    app_clock: Callable[[], datetime],
    server_clock: Callable[[], datetime],
    *,
    threshold: timedelta,
    trigger: str,
) -> ClockSkew:
    """Bracket one ``server_clock()`` reading between two ``app_clock()`` readings."""
    t0 = check_aware(app_clock(), "the application clock")
    server = check_aware(server_clock(), "the server clock")
    t1 = check_aware(app_clock(), "the application clock")
    bound = abs(t1 - t0) / 2
    midpoint = min(t0, t1) + bound
    return ClockSkew(midpoint - server, bound, threshold, server, trigger)


class SkewSchedule:
    """When the next lease-expiry measurement is due: at most one per ``interval`` of the
    application clock; a clock that went backwards makes one due at once."""

    __slots__ = ("_interval", "_last", "_lock")

    def __init__(self, interval: timedelta = DEFAULT_INTERVAL) -> None:
        self._interval = interval
        self._last: datetime | None = None
        self._lock = threading.Lock()

    def due(self, now: datetime) -> bool:
        """True (and the slot taken) when a measurement may run at ``now``."""
        with self._lock:
            last = self._last
            if last is not None and last <= now < last + self._interval:
                return False
            self._last = now
            return True


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
