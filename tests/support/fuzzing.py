"""The fuzz suite's example budget: small and derandomized in ``make test`` (the same examples
every run, well under a minute in all), large and random under ``make fuzz``
(``CTRLRUN_FUZZ_EXAMPLES``; docs/testing.md)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

F = TypeVar("F", bound=Callable[..., Any])

LONG = os.environ.get("CTRLRUN_FUZZ_EXAMPLES")


def budget(examples: int) -> Callable[[F], F]:
    """``@settings`` for one fuzz test: ``examples`` in ``make test``; ``make fuzz``'s count
    (random, so each long run explores new inputs) when it is set."""
    chosen = settings(
        max_examples=int(LONG) if LONG else examples,
        derandomize=not LONG,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    return chosen  # type: ignore[return-value]
