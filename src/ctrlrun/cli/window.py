"""``--since``: how far back a report reads, as a span (``7d``, ``24h``, ``30m``) or an
instant (``2026-12-01`` or an ISO 8601 time, UTC unless it names an offset)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

import click

from ctrlrun.cli.common import Refusal

F = TypeVar("F", bound=Callable[..., Any])

_SPAN: Final = re.compile(r"([0-9]{1,6})([smhdw])")
_UNIT: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(value: str, now: datetime) -> datetime:
    """The instant ``value`` names, spans counted back from ``now``; ``Refusal`` otherwise."""
    span = _SPAN.fullmatch(value.strip())
    if span is not None:
        return now - timedelta(seconds=int(span.group(1)) * _UNIT[span.group(2)])
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise Refusal(
            f"--since takes a span (7d, 24h, 30m) or a date/time (2026-12-01), got {value!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def since_option(fn: F) -> F:
    """``--since SPAN|DATE``: None when not given (the whole history)."""
    return click.option(
        "--since",
        metavar="SPAN|DATE",
        help="Only what was recorded since then: 7d, 24h, 30m, or a date such as 2026-12-01.",
    )(fn)
