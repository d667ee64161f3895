"""Work done inside a store's write transaction, identical for every SQL backend.

Each ``*_in_txn`` function reads what it needs through a ``Txn``, asks a kernel planner, and
writes only what the planner decided, with every transition a conditional statement whose row
count is checked. A function that must keep a write despite refusing raises ``KeptRefusal``:
the backend commits, then raises the refusal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from ctrlrun.errors import Refused
from ctrlrun.store.codec import Row


class Txn(Protocol):
    """One open write transaction of a backend, with its clock reading and its named queries."""

    @property
    def now(self) -> datetime:
        """The transaction's notion of now (SQLite: the store clock; Postgres: the server's)."""
        ...

    def one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        """Run named ``query`` and return its first row, if any."""
        ...

    def all(self, query: str, params: Mapping[str, Any]) -> Sequence[Row]:
        """Run named ``query`` and return every row."""
        ...

    def run(self, query: str, params: Mapping[str, Any]) -> int:
        """Run named ``query`` and return the number of rows it changed."""
        ...

    def run_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> None:
        """Run named ``query`` once per parameter set."""
        ...

    def insert_event_rows(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Append events given as tuples in ``EVENT_COLUMNS`` order (``store/ops/evidence``):
        ``event_insert`` for each row, in order, as cheaply as the backend can."""
        ...

    def run_later(self, query: str, params: Mapping[str, Any]) -> None:
        """Run named ``query``, whose row count nobody needs, no later than the COMMIT.

        Only for a statement that either does exactly what it says or fails the transaction
        (an INSERT without ``ON CONFLICT``, an UPDATE of a row this transaction has locked). A
        backend may send it with the next statement to save a round trip; its failure still
        fails the transaction before anything is committed.
        """
        ...

    def ts(self, value: datetime | None) -> Any:
        """A timestamp as this backend binds it."""
        ...

    def read_ts(self, value: Any) -> datetime:
        """A timestamp column as an aware UTC datetime."""
        ...


class KeptRefusal(Exception):
    """Commit what this transaction wrote, then raise ``refusal``."""

    def __init__(self, refusal: Refused) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal
