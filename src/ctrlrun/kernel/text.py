"""Names and keys a person will read: one rule for every label an agent can supply.

Principal names (agent, user), resources and effect keys are shown to approvers, printed by
the CLI and pasted into commands. They are kept exactly as given (an effect key is compared
code point by code point), so what cannot be shown faithfully is refused instead: control and
format characters (Unicode Cc, Cf), line and paragraph separators (Zl, Zp), and leading or
trailing whitespace, which no table or prompt shows.
"""

from __future__ import annotations

import unicodedata
from typing import Final

from ctrlrun.errors import InvalidArgument

REFUSED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp"})  # lone surrogates (Cs): the
# canonical encoder refuses them, naming where they are


def check_label(value: object, what: str) -> str:
    """``value`` if it is a non-empty string without refused characters or surrounding
    whitespace; else ``InvalidArgument`` naming ``what`` and the offending code point."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{what} must be a non-empty string, got {value!r}")
    if value != value.strip():
        raise InvalidArgument(f"{what} must not start or end with whitespace, got {value!r}")
    if not value.isprintable():  # the fast path: printable text has none of the refused
        for char in value:
            if unicodedata.category(char) in REFUSED_CATEGORIES:
                raise InvalidArgument(
                    f"{what} must be printable text: U+{ord(char):04X}"
                    f" ({unicodedata.name(char, 'unnamed')}) in {value!r}"
                )
    return value


def check_optional_label(value: object, what: str) -> str | None:
    """``check_label``, with None allowed."""
    return None if value is None else check_label(value, what)
