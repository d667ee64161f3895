"""Which receipt chain (partition) a receipt belongs to.

A store keeps a fixed number of receipt chains, chosen when it is created, so that two calls
for different effects never wait on one head row. The partition of a receipt is a pure
function of something every retry of one effect shares: the effect key when the action has
one, otherwise the action id. It is SHA-256 of that text's UTF-8 bytes, read as an unsigned
big-endian integer, modulo the partition count: stable across processes, hosts and Python
versions (``hash()`` is salted per process, so it is never used here).

A receipt document written into partition ``p > 0`` carries ``"partition": p``; a document
without the field is partition 0 (every receipt written before chains were partitioned).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from ctrlrun.errors import InvalidArgument

PARTITION_FIELD: Final = "partition"
"""The receipt document's field naming its partition (absent: partition 0)."""

MAX_PARTITIONS: Final = 4096
"""The most chains a store may keep: each is one head row and one line of every checkpoint."""

DEFAULT_PARTITIONS_POSTGRES: Final = 64
"""Postgres default: enough head rows that 8+ concurrent writers rarely share one."""

DEFAULT_PARTITIONS_SQLITE: Final = 1
"""SQLite default: it serialises writers on the file anyway, so more chains buy nothing."""


def check_count(count: int) -> int:
    """``count`` if it is a valid partition count (1..MAX_PARTITIONS); ``InvalidArgument``
    otherwise. A ``bool`` is not a count."""
    if type(count) is not int or not 1 <= count <= MAX_PARTITIONS:
        raise InvalidArgument(
            f"the number of receipt partitions must be an integer from 1 to {MAX_PARTITIONS},"
            f" not {count!r}"
        )
    return count


def partition_of(source: str, count: int) -> int:
    """The partition ``source`` (an effect key or an action id) maps to among ``count``."""
    check_count(count)
    if count == 1:
        return 0
    return int.from_bytes(hashlib.sha256(source.encode("utf-8")).digest(), "big") % count


def receipt_partition(effect_key: str | None, action_id: str, count: int) -> int:
    """The partition of an action's receipt: by its effect key when it has one (every retry
    of one effect shares it), otherwise by its action id."""
    return partition_of(action_id if effect_key is None else effect_key, count)


def stated_partition(document: Mapping[str, Any]) -> int | None:
    """The partition a receipt document states (0 when it has no field), or None when the
    field holds something no writer puts there (not a non-negative integer)."""
    value = document.get(PARTITION_FIELD, 0)
    if type(value) is not int or value < 0:
        return None
    return value
