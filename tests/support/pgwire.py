"""Just enough of the Postgres wire protocol (v3) and of SQL lexing for the fault proxy.

* ``FrameParser`` frames one direction of a connection incrementally: bytes may arrive in any
  split, down to one byte per ``recv``; a frame is returned only when complete.
* ``split_statements`` / ``is_commit`` classify SQL text. They look at statement *text* (a simple
  Query or a Parse), never at Bind parameters; a statement "is a commit" when its first keyword
  is ``COMMIT`` or ``END`` (``COMMIT PREPARED`` excluded), so the word inside a string literal,
  an identifier or a comment never counts.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_FRAME = 1 << 30


class ProtocolError(ValueError):
    """The byte stream is not framed the way the protocol says."""


@dataclass(frozen=True)
class Frame:
    """One message. ``type`` is ``b""`` for the untyped startup-phase frontend messages;
    ``body`` excludes type and length; ``raw`` is the exact bytes seen on the wire."""

    type: bytes
    body: bytes
    raw: bytes

    @property
    def code(self) -> int:
        """The request code of an untyped message (startup, SSLRequest, …)."""
        return int(struct.unpack_from("!i", self.body)[0]) if len(self.body) >= 4 else -1


class FrameParser:
    """Incremental framer for one direction. ``feed`` bytes; ``next_frame`` returns a complete
    frame or None. The caller says whether the next frame is untyped (startup phase)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def take_rest(self) -> bytes:
        """Everything not yet framed (used when the stream turns opaque, e.g. TLS)."""
        rest = bytes(self._buf)
        self._buf.clear()
        return rest

    def next_frame(self, *, untyped: bool = False) -> Frame | None:
        header = 4 if untyped else 5
        if len(self._buf) < header:
            return None
        (length,) = struct.unpack_from("!i", self._buf, header - 4)
        if length < 4 or length > MAX_FRAME:
            raise ProtocolError(f"bad message length {length}")
        total = header - 4 + length
        if len(self._buf) < total:
            return None
        raw = bytes(self._buf[:total])
        del self._buf[:total]
        return Frame(type=b"" if untyped else raw[:1], body=raw[header:], raw=raw)


def cstrings(body: bytes, count: int) -> list[str]:
    """The first ``count`` NUL-terminated strings of ``body`` (decoded leniently)."""
    out: list[str] = []
    pos = 0
    for _ in range(count):
        end = body.find(b"\0", pos)
        if end < 0:
            raise ProtocolError("unterminated string")
        out.append(body[pos:end].decode("utf-8", errors="replace"))
        pos = end + 1
    return out


def message(type_: bytes, body: bytes) -> bytes:
    """Encode one typed message (used by the self-tests to build synthetic streams)."""
    return type_ + struct.pack("!i", len(body) + 4) + body


def startup(code: int, body: bytes = b"") -> bytes:
    """Encode one untyped startup-phase message."""
    return struct.pack("!ii", len(body) + 8, code) + body


# --------------------------------------------------------------------------- SQL lexing


def _skip_dollar_quote(sql: str, i: int) -> int | None:
    """If a dollar-quote tag starts at ``i``, return the index after the closing tag."""
    j = i + 1
    while j < len(sql) and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    if j >= len(sql) or sql[j] != "$" or (j > i + 1 and sql[i + 1].isdigit()):
        return None
    tag = sql[i : j + 1]
    end = sql.find(tag, j + 1)
    return len(sql) if end < 0 else end + len(tag)


def _skip_quoted(sql: str, i: int, quote: str, *, backslash: bool) -> int:
    j = i + 1
    while j < len(sql):
        ch = sql[j]
        if backslash and ch == "\\":
            j += 2
            continue
        if ch == quote:
            if j + 1 < len(sql) and sql[j + 1] == quote:
                j += 2
                continue
            return j + 1
        j += 1
    return len(sql)


def _skip_block_comment(sql: str, i: int) -> int:
    depth, j = 0, i
    while j < len(sql):
        if sql.startswith("/*", j):
            depth += 1
            j += 2
        elif sql.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        else:
            j += 1
    return len(sql)


def split_statements(sql: str) -> list[str]:
    """Top-level statements of ``sql`` with comments blanked out, stripped, empties dropped.

    Semicolons inside '…', E'…', "…", $tag$…$tag$ and comments do not split."""
    out: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(sql):
        ch = sql[i]
        nxt = sql[i + 1] if i + 1 < len(sql) else ""
        if ch == "-" and nxt == "-":
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end
            cur.append(" ")
            continue
        if ch == "/" and nxt == "*":
            i = _skip_block_comment(sql, i)
            cur.append(" ")
            continue
        if ch in "'\"":
            backslash = ch == "'" and i > 0 and sql[i - 1] in "eE" and not _ident_before(sql, i - 1)
            end = _skip_quoted(sql, i, ch, backslash=backslash)
        elif ch == "$" and not _ident_before(sql, i):
            end = _skip_dollar_quote(sql, i) or i + 1
        elif ch == ";":
            out.append("".join(cur))
            cur = []
            i += 1
            continue
        else:
            end = i + 1
        cur.append(sql[i:end])
        i = end
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def _ident_before(sql: str, i: int) -> bool:
    """True when the character before index ``i`` continues an identifier."""
    return i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$")


def _is_commit_statement(stmt: str) -> bool:
    words = stmt.lower().split()
    if not words or words[0] not in ("commit", "end"):
        return False
    return not (len(words) > 1 and words[1] == "prepared")


def is_commit(sql: str) -> bool:
    """True when any top-level statement of ``sql`` IS a commit (``COMMIT``, ``COMMIT WORK``,
    ``COMMIT AND CHAIN``, ``END``, ``END TRANSACTION``…; not ``COMMIT PREPARED``)."""
    return any(_is_commit_statement(s) for s in split_statements(sql))
