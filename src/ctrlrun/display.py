"""What a person reads and what a person pastes: text an agent may control, made safe.

``escape_text`` is the one rule for showing agent-controlled text (principals, effect keys,
resources, arguments, notes, error texts) to a person: every character that could steer a
terminal or the reader instead of being read is replaced by a visible escape. ``command_line``
is the one rule for a command a person is told to paste: every word shell-quoted.

Stdlib only and pure, so the kernel's messages, the command line and any later surface (a
console, a gateway) can share them.
"""

from __future__ import annotations

import shlex
import unicodedata
from typing import Final

UNSAFE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})
"""Controls (C0, DEL, C1), format characters (bidi overrides and isolates, zero-width
characters, tag characters, the soft hyphen), lone surrogates, unassigned code points (a newer
terminal may give them a meaning) and the line and paragraph separators."""

_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def is_unsafe(char: str) -> bool:
    """Whether ``char`` must not reach a person's terminal as it is."""
    return unicodedata.category(char) in UNSAFE_CATEGORIES


def _text_escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    point = ord(char)
    if point <= 0xFF:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def _json_escape(char: str) -> str:
    point = ord(char)
    if point <= 0xFFFF:
        return f"\\u{point:04x}"
    point -= 0x10000  # a JSON string spells an astral character as its surrogate pair
    return f"\\u{0xD800 + (point >> 10):04x}\\u{0xDC00 + (point & 0x3FF):04x}"


def escape_text(text: str, *, json: bool = False) -> str:
    """``text`` with every unsafe character (``is_unsafe``) shown as a visible escape.

    Plain text gets ``\\n``, ``\\t``, ``\\x1b``, ``\\u202e``, ``\\U000e0041``: a newline can never
    start a row, an escape sequence never reaches the terminal, a bidi override never reorders
    what follows. With ``json``, ``text`` is JSON (as ``json.dumps(..., ensure_ascii=False)``
    writes it, which leaves C1, format and separator characters raw) and the escapes are JSON's
    own ``\\uXXXX``: the result is still exact JSON, decoding to the same values. Everything
    else, backslashes included, is left as it is, so escaping twice changes nothing.
    """
    if text.isprintable():  # the common case, in C: no control, format or separator character
        return text
    escape = _json_escape if json else _text_escape
    return "".join(escape(c) if is_unsafe(c) else c for c in text)


def command_line(*words: str) -> str:
    """A command a person can paste into a POSIX shell: each word quoted as it needs
    (``shlex.quote``), so a value with spaces, ``;``, ``$(…)`` or quotes stays one argument and
    runs nothing."""
    return shlex.join(words)
