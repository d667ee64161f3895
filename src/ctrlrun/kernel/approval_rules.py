"""How a person's approval of an action must be given: for how long a request stands, how
many distinct people must grant it, and whether the requester may be one of them.

Written in the policy per action (``approval:``) over defaults for every action
(``approvals:``); part of the policy hash. Pure values, validated at construction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from ctrlrun.errors import InvalidArgument

MAX_TTL: Final = timedelta(days=30)
MAX_COUNT: Final = 16
_DURATION: Final = re.compile(r"([1-9][0-9]{0,6})([smhd])")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_duration(value: object) -> timedelta:
    """``"90s"``, ``"15m"``, ``"1h"``, ``"2d"`` (one whole number and a unit) as a timedelta;
    ``InvalidArgument`` for anything else, so a typo never becomes a default."""
    if isinstance(value, timedelta):
        return value
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidArgument(
            f"a duration is a whole number and a unit (s, m, h, d), like 15m or 1h; got {value!r}"
        )
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def render_duration(value: timedelta) -> str:
    """The shortest ``parse_duration`` text for ``value`` (whole seconds)."""
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True, slots=True)
class ApprovalRules:
    """``ttl``: how long a request stands and a grant stays usable (None: the ``Control``'s
    ``approval_ttl``, 15 minutes unless configured). ``count``: how many
    distinct approvers must grant it. ``distinct_from_requester``: the requesting agent or
    user cannot be one of them."""

    ttl: timedelta | None = None
    count: int = 1
    distinct_from_requester: bool = False

    def __post_init__(self) -> None:
        ttl: object = self.ttl
        if ttl is not None and (
            not isinstance(ttl, timedelta) or not timedelta(0) < ttl <= MAX_TTL or ttl.microseconds
        ):
            raise InvalidArgument(f"an approval ttl is whole seconds from 1s to 30d, got {ttl!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int):
            raise InvalidArgument(f"count must be an integer, got {self.count!r}")
        if not 1 <= self.count <= MAX_COUNT:
            raise InvalidArgument(f"count must be between 1 and {MAX_COUNT}, got {self.count}")
        value: object = self.distinct_from_requester
        if not isinstance(value, bool):
            raise InvalidArgument(f"distinct_from_requester must be true or false, got {value!r}")

    @classmethod
    def parse(cls, body: dict[str, Any], base: ApprovalRules | None = None) -> ApprovalRules:
        """``base`` (default: the defaults) with the keys of ``body`` applied."""
        start = base or DEFAULT_RULES
        return cls(
            ttl=parse_duration(body["ttl"]) if "ttl" in body else start.ttl,
            count=body.get("count", start.count),
            distinct_from_requester=body.get(
                "distinct_from_requester", start.distinct_from_requester
            ),
        )

    def to_document(self) -> dict[str, Any]:
        """The keys that differ from the defaults (empty for the defaults)."""
        out: dict[str, Any] = {}
        if self.ttl is not None:
            out["ttl"] = render_duration(self.ttl)
        if self.count != 1:
            out["count"] = self.count
        if self.distinct_from_requester:
            out["distinct_from_requester"] = True
        return out


DEFAULT_RULES: Final = ApprovalRules()
APPROVAL_KEYS: Final = ("ttl", "count", "distinct_from_requester")
