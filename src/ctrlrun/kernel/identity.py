"""When two names are one person: the single rule every approver check uses.

``distinct_from_requester`` and an M-of-N quorum compare *identities*, not strings: a name
with a trailing space, another case, a fullwidth letter or a look-alike from another script
(Cyrillic U+0430 for Latin ``a``) is the same identity as the name it imitates. The rule
(``identity_key``), in order:

1. NFKC (compatibility forms fold: fullwidth U+FF42 is ``b``), then trim white space;
2. the UTS #39 confusable skeleton of that (``skeleton``), then full case folding, then the
   skeleton again — so a look-alike of either case (Cyrillic U+0412 for ``B``, digit ``0`` whose
   prototype is ``O``) lands on the same key.

Two names are one identity when their keys are equal (``same_identity``). The skeleton is
Unicode's own (UTS #39 section 4: NFD, drop default-ignorable code points, map each character
to its prototype in ``confusables.txt``, NFD again), from the published data file vendored
beside this module (``data/confusables.txt``, Unicode 17.0.0, unmodified), read once on first
use. Pure: no decision here depends on anything but the two names.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Final

DATA_FILE: Final = "confusables.txt"
UNICODE_VERSION: Final = "17.0.0"

# Default_Ignorable_Code_Point (DerivedCoreProperties.txt), which UTS #39's skeleton removes:
# invisible in rendering, so "support\u200bbot" must not be another identity.
_IGNORABLE: Final = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)


def is_default_ignorable(char: str) -> bool:
    """Whether ``char`` has the Unicode property Default_Ignorable_Code_Point."""
    point = ord(char)
    return any(low <= point <= high for low, high in _IGNORABLE)


@cache
def prototypes() -> dict[str, str]:
    """``confusables.txt`` as ``{source character: prototype string}`` (6,565 mappings)."""
    text = (resources.files(__package__) / "data" / DATA_FILE).read_text(encoding="utf-8-sig")
    table: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split(";")
        if len(fields) < 3:  # a comment or a blank line
            continue
        source, target = fields[0].strip(), fields[1].split()
        table[chr(int(source, 16))] = "".join(chr(int(point, 16)) for point in target)
    return table


def skeleton(text: str) -> str:
    """UTS #39's ``skeleton(text)``: two strings are confusable exactly when their skeletons
    are equal. Case-sensitive, as the standard defines it."""
    table = prototypes()
    decomposed = unicodedata.normalize("NFD", text)
    mapped = "".join(table.get(c, c) for c in decomposed if not is_default_ignorable(c))
    return unicodedata.normalize("NFD", mapped)


def identity_key(name: str) -> str:
    """The key two names share exactly when they are one identity (the module's rule)."""
    trimmed = unicodedata.normalize("NFKC", name).strip()
    return skeleton(skeleton(trimmed).casefold()).strip()


def same_identity(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one identity."""
    return identity_key(a) == identity_key(b)


def identities(names: Iterable[str]) -> set[str]:
    """The distinct identities among ``names`` (their keys)."""
    return {identity_key(name) for name in names}
