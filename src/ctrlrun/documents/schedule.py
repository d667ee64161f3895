"""When a ``DocumentSession`` saves: a scheduler for its debounce and retry timers.

``ThreadScheduler`` (the default) runs callbacks on timer threads. ``ManualScheduler`` runs them
only when told (``advance``), on the caller's thread: tests and event loops drive a session
deterministically with it, without sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("ctrlrun.documents")


class Cancellable(Protocol):
    """A scheduled call that may still be called off."""

    def cancel(self) -> None:
        """Do not run it (no effect if it already ran)."""
        ...


class Scheduler(Protocol):
    """Runs ``callback`` once, ``delay`` seconds from now."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> Cancellable:
        """Schedule ``callback``; the handle cancels it."""
        ...


def _logged(callback: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        try:
            callback()
        except Exception:  # a timer thread has no caller to tell; the session keeps its state
            log.exception("a scheduled document save failed unexpectedly")

    return run


class ThreadScheduler:
    """Each call on its own daemon ``threading.Timer``."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> Cancellable:
        """See ``Scheduler.call_later``."""
        timer = threading.Timer(max(delay, 0.0), _logged(callback))
        timer.daemon = True
        timer.start()
        return timer


class _Call:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback, self.cancelled = callback, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """A virtual clock: nothing runs until ``advance``, which runs what fell due, in order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, _Call]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()

    def call_later(self, delay: float, callback: Callable[[], object]) -> Cancellable:
        """See ``Scheduler.call_later``."""
        call = _Call(callback)
        with self._lock:
            heapq.heappush(self._queue, (self.now + max(delay, 0.0), next(self._order), call))
        return call

    @property
    def pending(self) -> int:
        """How many calls are scheduled and not cancelled."""
        with self._lock:
            return sum(1 for _, _, call in self._queue if not call.cancelled)

    def advance(self, seconds: float) -> int:
        """Move the clock on by ``seconds`` and run every call due by then (including calls
        those calls schedule within the window). Returns how many ran."""
        until = self.now + seconds
        ran = 0
        while True:
            with self._lock:
                if not self._queue or self._queue[0][0] > until:
                    break
                due, _, call = heapq.heappop(self._queue)
                self.now = max(self.now, due)
            if not call.cancelled:
                call.callback()
                ran += 1
        self.now = until
        return ran
