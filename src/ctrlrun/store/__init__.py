"""State stores: the protocol, the SQLite default, and opening one from a URL.

``ctrlrun.store.postgres`` is imported only when a ``postgresql://`` URL is opened, so
``import ctrlrun`` never imports a database driver beyond the standard library's sqlite3.
"""

from __future__ import annotations

from typing import Any

from ctrlrun._time import Clock
from ctrlrun.errors import InvalidArgument, PartitionRefusal, PartitionsMismatch
from ctrlrun.store.budgets import peek_budget
from ctrlrun.store.protocol import FinishRequest, Started, StartRequest, StateStore
from ctrlrun.store.url import StoreURL, parse_store_url

__all__ = [
    "FinishRequest",
    "StartRequest",
    "Started",
    "StateStore",
    "StoreURL",
    "open_store",
    "parse_store_url",
    "peek_budget",
]


def open_store(
    url: str,
    *,
    clock: Clock | None = None,
    existing: bool = False,
    read_only: bool = False,
    create: bool = True,
    partitions: int | None = None,
) -> StateStore:
    """Open the store ``url`` names. Without ``create``, a missing or empty store is
    ``StoreNotFound`` (an existing one is still migrated). With ``existing``, create and
    migrate nothing: refuse a store that is missing, behind or ahead (for commands that
    answer from the shell). With
    ``read_only`` (which implies ``existing``), also write nothing: a SQLite file is opened
    ``mode=ro`` and can be read on read-only media; a Postgres store needs only ``USAGE`` on
    the schema and ``SELECT`` on its tables.

    ``partitions`` (or the Postgres URL's ``ctrlrun_partitions``) is how many receipt chains a
    new store is created with (Postgres default 64; SQLite keeps one); an existing store
    given another count refuses to open (``PartitionsMismatch``)."""
    parsed = parse_store_url(url)
    if partitions is not None and parsed.partitions is not None and partitions != parsed.partitions:
        raise InvalidArgument("the store URL and the partitions argument name different counts")
    partitions = partitions if partitions is not None else parsed.partitions
    existing = existing or read_only
    if parsed.kind == "sqlite":
        from ctrlrun.store.sqlite import SQLiteStateStore

        if partitions not in (None, 1):  # refused before the file is touched
            raise PartitionsMismatch(
                f"a SQLite store keeps one receipt chain, not {partitions}: its writers take"
                " turns on the file, so more chains buy nothing (use Postgres for several)",
                reason=PartitionRefusal.NOT_SUPPORTED,
                stored=1,
                given=int(partitions or 1),
            )
        if existing:
            return SQLiteStateStore.open_existing(parsed.target, clock=clock, read_only=read_only)
        return SQLiteStateStore(parsed.target, clock=clock, create=create)
    try:
        from ctrlrun.postgres import PostgresStateStore  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("ctrlrun"):
            raise InvalidArgument("this build of ctrlrun has no Postgres store") from exc
        raise
    if existing:
        return PostgresStateStore.open_existing(
            parsed.target, schema=parsed.schema, clock=clock, partitions=partitions
        )
    durability: dict[str, Any] = {"require_sync": parsed.require_sync}
    if parsed.commit_timeout is not None:
        durability["commit_timeout"] = parsed.commit_timeout
    return PostgresStateStore(
        parsed.target,
        schema=parsed.schema,
        clock=clock,
        create=create,
        partitions=partitions,
        **durability,
    )
