"""How a person is shown an argument the policy says how to show (``display:``, docs/policy.md).

Money travels as integer minor units (``250000``); a person deciding a refund should read
``€2,500.00 (250000)``: the amount as people write it, and the exact value the call carries
beside it, so nothing is rounded away or hidden. Pure: the console, the command line and
notification bodies call ``shown_value``/``shown_arguments`` with the policy's entries.
Not a decision input and not part of the policy hash.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ctrlrun.errors import InvalidArgument

DISPLAY_KEYS: Final = ("money", "minor")
"""What ``display.<argument>`` may hold: ``money`` (the currency) and ``minor`` (its digits)."""
MAX_MINOR: Final = 4
_CURRENCY: Final = re.compile(r"[A-Z]{3}")
SYMBOLS: Final = {"EUR": "€", "USD": "$", "GBP": "£", "JPY": "¥", "INR": "₹"}
"""Currencies written with a symbol; any other ISO 4217 code is written before the amount."""


@dataclass(frozen=True, slots=True)
class Money:
    """An integer argument in minor units of ``currency`` (ISO 4217, ``EUR``), ``minor``
    digits after the point (2 for cents, 0 for yen)."""

    currency: str
    minor: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.currency, str) or not _CURRENCY.fullmatch(self.currency):
            raise InvalidArgument(
                f"a currency is an ISO 4217 code of three capital letters, got {self.currency!r}"
            )
        if type(self.minor) is not int or not 0 <= self.minor <= MAX_MINOR:
            raise InvalidArgument(
                f"minor must be an integer from 0 to {MAX_MINOR}, got {self.minor!r}"
            )

    def to_document(self) -> dict[str, Any]:
        """``{"money": "EUR", "minor": 2}``, as the policy writes it."""
        return {"money": self.currency, "minor": self.minor}


def format_money(amount: int, money: Money) -> str:
    """``250000`` in EUR (2 minor digits) as ``€2,500.00 (250000)``; ``-500`` as
    ``-€5.00 (-500)``; ``5000`` in CHF as ``CHF 50.00 (5000)``."""
    units, cents = divmod(abs(amount), 10**money.minor)
    number = f"{units:,}" + (f".{cents:0{money.minor}d}" if money.minor else "")
    symbol = SYMBOLS.get(money.currency)
    text = f"{symbol}{number}" if symbol else f"{money.currency} {number}"
    return f"{'-' if amount < 0 else ''}{text} ({amount})"


def shown_value(value: object, money: Money | None) -> str | None:
    """``value`` as ``format_money`` writes it when ``money`` applies to it (an integer, not a
    bool); None otherwise: the caller shows the value as it is."""
    if money is None or type(value) is not int:
        return None
    return format_money(value, money)


def shown_arguments(arguments: Mapping[str, Any], displays: Mapping[str, Money]) -> dict[str, str]:
    """The arguments ``displays`` names, as a person reads them (``{"amount": "€2,500.00
    (250000)"}``); an argument that is absent or not an integer is left out."""
    out = {}
    for name, money in displays.items():
        text = shown_value(arguments.get(name), money)
        if text is not None:
            out[name] = text
    return out
