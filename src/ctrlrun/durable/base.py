"""What the durable parts need from a store, and the small helpers they share.

A durable part needs only the store's public extension point: ``dialect`` (which named-query
files to read), ``schema`` (the Postgres schema), ``execute_on(conn, name, params)`` (a named
query on a caller's own connection: the store knows its driver, the durable parts do not),
``transact(work)`` (one write transaction, handed a ``DriverTxn``: on SQLite ``BEGIN
IMMEDIATE``) and ``read(work)``. Every ``*_in_txn`` function reads through the ``Txn``,
decides with a pure kernel function, and writes with conditional statements whose row counts
it checks. ``txn.now`` is the store's clock reading (on Postgres, the server's): every lease is
stamped and compared on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from ctrlrun.canonical import canonical_text, plain
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.ops import Txn
from ctrlrun.store.protocol import DriverTxn

T = TypeVar("T")


class DurableStore(Protocol):
    """The part of a ``StateStore`` the durable parts compose with."""

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgres"``."""
        ...

    @property
    def schema(self) -> str | None:
        """The Postgres schema; None on SQLite."""
        ...

    def transact(self, work: Callable[[DriverTxn], T]) -> T:
        """Run ``work`` in one write transaction."""
        ...

    def read(self, work: Callable[[Txn], T]) -> T:
        """Run ``work`` outside any write transaction."""
        ...

    def execute_on(self, conn: Any, name: str, params: Mapping[str, Any]) -> tuple[int, list[Any]]:
        """Run named query ``name`` on the caller's own connection, in the caller's open
        transaction (refused, ``InvalidArgument``, if it would commit on its own)."""
        ...


def stamp(txn: Txn, **params: Any) -> dict[str, Any]:
    """``params`` plus ``now``: the transaction's clock reading as the backend binds it."""
    return {"now": txn.ts(txn.now), **params}


def lease_params(
    txn: Txn,
    lease: timedelta,
    at: str = "lease_expires_at",
    secs: str = "lease_seconds",
) -> dict[str, Any]:
    """A lease both ways: the absolute instant ``at`` (SQLite binds it) and its length in
    seconds ``secs`` (the Postgres statements add it to the server's ``now()`` themselves)."""
    return {at: txn.ts(txn.now + lease), secs: seconds(lease)}


def seconds(delta: timedelta) -> float:
    """``delta`` in seconds, as a float parameter."""
    return delta.total_seconds()


def json_text(value: Any) -> str:
    """Canonical JSON of a caller's value; ``InvalidArgument`` naming the path if it has none."""
    return canonical_text(plain(value))


def check_name(value: object, what: str) -> str:
    """A non-empty one-line string."""
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise InvalidArgument(f"{what} must be a non-empty one-line string, got {value!r}")
    return value


def check_positive_int(value: object, what: str) -> int:
    """An integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{what} must be an integer >= 1, got {value!r}")
    return value


def aware_or_none(value: datetime | None, what: str) -> datetime | None:
    """``value`` as aware UTC, or None."""
    from ctrlrun._time import check_aware

    return None if value is None else check_aware(value, what)
