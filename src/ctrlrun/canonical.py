"""Canonical JSON, digests and prefixed identifiers.

The canonical form is the one serialisation every hash in ctrlrun is taken over: JSON with keys
sorted at every depth, no whitespace, non-ASCII emitted as UTF-8 (no escaping, no Unicode
normalisation: NFC and NFD spellings hash differently, on purpose). Accepted values are ``str``,
``int`` (``bool`` included, as JSON ``true``/``false``), ``None``, lists and tuples of accepted
values, and mappings with ``str`` keys. Floats are refused at any depth (money is integer minor
units), as are NaN, non-string keys, lone surrogates and every other type.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import uuid
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring
from typing import Any, Final

from ctrlrun.errors import InvalidArgument

GENESIS_HASH: Final = "sha256:" + "00" * 32

MAX_DEPTH: Final = 32
"""How deeply containers may nest in canonical data (a cycle is reported as too deep)."""
MAX_INT_DIGITS: Final = 640
"""The most decimal digits an integer may have (Python refuses to print past 4,300)."""
_INT_LIMIT: Final = 10**MAX_INT_DIGITS

_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def is_plain(value: Any, depth: int = 0) -> bool:
    """True iff ``value`` is already plain JSON data: ``dict`` with ``str`` keys, ``list``,
    ``tuple``, ``str``, ``int`` (within ``MAX_INT_DIGITS``), ``bool``, ``None`` — exact types,
    no floats, nested at most ``MAX_DEPTH`` deep.

    The fast path: a walk that allocates nothing. Anything else goes through ``plain``, which
    says what is wrong.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_INT_LIMIT < value < _INT_LIMIT)
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not is_plain(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        return all(is_plain(item, depth + 1) for item in value)
    return False


def plain(value: Any, path: str = "$", depth: int = 0) -> Any:
    """``value`` as plain JSON data (dict, list, str, int, bool, None), validated in one walk.

    Raises ``InvalidArgument`` naming the path of the first value that has no canonical form,
    nests deeper than ``MAX_DEPTH`` (a cycle included), or is an integer of more than
    ``MAX_INT_DIGITS`` digits.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if isinstance(value, int) and not -_INT_LIMIT < value < _INT_LIMIT:
        raise InvalidArgument(
            f"{path}: integer of more than {MAX_INT_DIGITS} digits refused", path=path
        )
    if kind is int:
        return value
    if depth >= MAX_DEPTH and isinstance(value, Mapping | list | tuple):
        raise InvalidArgument(
            f"{path}: nested deeper than {MAX_DEPTH} levels (or a cycle)", path=path
        )
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(
                    f"{path}: key {key!r} is a {type(key).__name__}; keys must be str", path=path
                )
            out[str.__str__(key)] = plain(item, f"{path}.{key}", depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [plain(item, f"{path}[{index}]", depth + 1) for index, item in enumerate(value)]
    if isinstance(value, float):
        raise InvalidArgument(
            f"{path}: float {value!r} refused; use integer minor units or a decimal string",
            path=path,
        )
    if isinstance(value, str):  # StrEnum and other str subclasses keep their plain value
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    raise InvalidArgument(f"{path}: {type(value).__name__} has no canonical JSON form", path=path)


def plain_text(value: Any) -> str:
    """The canonical JSON text of ``value``, which the caller guarantees is plain already
    (``is_plain`` holds, or it was built from plain parts): no validating walk.

    Exactly ``canonical_text(value)`` for such a value. Text holding a lone surrogate comes
    back as is; encoding it to UTF-8 fails (``canonical_bytes`` reports it).
    """
    return _ENCODER.encode(value)


# The canonical JSON text of one ``str``: quoted, only ``"``, ``\\`` and control characters
# escaped (what ``canonical_text`` writes for it inside any document). The C function itself,
# not a wrapper: it is called once per string field of every receipt.
string_text: Final[Callable[[str], str]] = encode_basestring


def _encode(value: Any, path: str = "$") -> bytes:
    try:
        return plain_text(value if is_plain(value) else plain(value, path)).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{_surrogate_path(value, path)}: text is not valid Unicode (lone surrogate)"
        ) from None


def _surrogate_path(value: Any, path: str) -> str:
    """Where the first unencodable text sits (slow path, only after a failure)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found = _surrogate_path(key, path) or _surrogate_path(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _surrogate_path(item, f"{path}[{index}]")
            if found:
                return found
    return ""


def canonical_bytes(value: Any, path: str = "$") -> bytes:
    """The canonical JSON bytes of ``value``; ``InvalidArgument`` (naming the path under
    ``path``) if it has none."""
    return _encode(value, path)


def canonical_text(value: Any, path: str = "$") -> str:
    """``canonical_bytes`` as text."""
    return _encode(value, path).decode("utf-8")


def sha256_hex(data: bytes) -> str:
    """``sha256:<lowercase hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical form of ``value``."""
    return sha256_hex(canonical_bytes(value))


def new_id(prefix: str) -> str:
    """A fresh identifier: ``<prefix>_`` and 32 lowercase hex digits (128 random bits)."""
    return f"{prefix}_{random_hex32()}"


# Identifiers draw on the OS's CSPRNG (os.urandom) 4 KiB at a time instead of 16 bytes per
# id: a protected call mints two ids, and a getrandom() system call each was ~5% of the
# call. Each thread has its own pool, an iterator over the ids its bytes make (one attribute
# read and one ``next`` an id: new_id 6.4k -> 4.3k instructions, 6 December 2026); a fork
# gives the child new, empty pools, so a child never reuses its parent's bytes.
_POOL_BYTES: Final = 4096
_pools = threading.local()


def _forked() -> None:
    global _pools  # noqa: PLW0603 - replaced whole in the child: every inherited pool dropped
    _pools = threading.local()


if hasattr(os, "register_at_fork"):  # pragma: no branch - every POSIX CPython has it
    os.register_at_fork(after_in_child=_forked)


def random_hex32() -> str:
    """32 lowercase hex digits (128 bits) from the OS's CSPRNG, never handed out twice."""
    try:
        return next(_pools.ids)  # type: ignore[no-any-return]
    except (AttributeError, StopIteration):  # this thread's first id, or its pool is spent
        text = secrets.token_bytes(_POOL_BYTES).hex()
        ids = iter([text[start : start + 32] for start in range(0, len(text), 32)])
        _pools.ids = ids
        return next(ids)


def derived_uuid(document: Any) -> str:
    """A deterministic UUID (version 8, RFC 9562 variant) from the canonical form of
    ``document``: the same document always yields the same UUID."""
    raw = bytearray(hashlib.sha256(canonical_bytes(document)).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x80  # version 8: custom
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
    return str(uuid.UUID(bytes=bytes(raw)))
