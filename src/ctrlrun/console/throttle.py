"""Sign-in throttling: failed passwords slow down per account and per client address.

Each key (an account name, a client address) counts its consecutive failures. The first
``free`` cost nothing; after that every failure locks the key for ``base`` doubled per further
failure, up to ``cap``. While either key of an attempt is locked, the attempt is refused
before any password is checked (the console answers 429 with ``Retry-After``). A successful
sign-in clears both keys. Per account, a guesser spread over many addresses is slowed; per
address, one address spraying many names is. The cost is that someone who knows a name can
keep that account slowed (never for longer than ``cap`` after their last try): a lockout that
delays, never one that bars.

Every failure that locks a key is logged (the name escaped), and the first refusal in each
locked window: enough to see an attack without a log line per request. Memory is bounded:
at most ``max_keys`` keys, the least recently failed dropped first.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from ctrlrun._time import Clock, utc_now
from ctrlrun.display import escape_text

log = logging.getLogger("ctrlrun.console")

FREE_FAILURES: Final = 3
BASE_DELAY: Final = timedelta(seconds=2)
MAX_DELAY: Final = timedelta(minutes=15)
MAX_KEYS: Final = 10_000


@dataclass(slots=True)
class _Failures:
    count: int
    locked_until: datetime
    reported: bool = False  # a refusal in this locked window was logged


class Throttle:
    """Backoff on failed sign-ins, per account and per client address (see the module)."""

    def __init__(
        self,
        *,
        clock: Clock = utc_now,
        free: int = FREE_FAILURES,
        base: timedelta = BASE_DELAY,
        cap: timedelta = MAX_DELAY,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self._clock = clock
        self.free, self.base, self.cap, self.max_keys = free, base, cap, max_keys
        self._keys: OrderedDict[str, _Failures] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, account: str, address: str | None) -> int | None:
        """Seconds (rounded up) until an attempt at ``account`` from ``address`` may be made;
        None when it may be made now."""
        now = self._clock()
        with self._lock:
            longest: timedelta | None = None
            for key in _keys(account, address):
                held = self._keys.get(key)
                if held is None or held.locked_until <= now:
                    continue
                left = held.locked_until - now
                longest = left if longest is None else max(longest, left)
                if not held.reported:
                    held.reported = True
                    log.warning(
                        "ctrlrun console: sign-in refused for %s (account %s, address %s):"
                        " locked for %ds after %d failures",
                        _shown(key),
                        _shown(account),
                        address,
                        math.ceil(left.total_seconds()),
                        held.count,
                    )
        return None if longest is None else max(1, math.ceil(longest.total_seconds()))

    def failed(self, account: str, address: str | None) -> None:
        """Count a wrong password for ``account`` from ``address``."""
        now = self._clock()
        with self._lock:
            for key in _keys(account, address):
                held = self._keys.pop(key, None)
                count = 1 if held is None else held.count + 1
                delay = self._delay(count)
                self._keys[key] = _Failures(count, now + delay)  # the most recent last
                if delay:
                    log.warning(
                        "ctrlrun console: failed sign-in %d for %s; next attempt in %ds",
                        count,
                        _shown(key),
                        math.ceil(delay.total_seconds()),
                    )
            while len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)

    def succeeded(self, account: str, address: str | None) -> None:
        """A right password: both keys start again from nothing."""
        with self._lock:
            for key in _keys(account, address):
                self._keys.pop(key, None)

    def _delay(self, count: int) -> timedelta:
        if count < self.free:
            return timedelta(0)
        doublings = min(count - self.free, 32)
        delay: timedelta = self.base * (1 << doublings)
        return min(delay, self.cap)


def _keys(account: str, address: str | None) -> tuple[str, ...]:
    named = (f"account:{account}",)
    return named if address is None else (*named, f"address:{address}")


def _shown(text: str) -> str:
    return escape_text(text)
