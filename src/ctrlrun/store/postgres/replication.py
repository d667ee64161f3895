"""The replication a Postgres store writes under, and the three checks that keep it honest.

* **What it is.** Every new connection reads ``replication_probe``: ``synchronous_commit``,
  ``synchronous_standby_names``, how many standbys stream from the server (and how many are
  synchronous, when the role may see it: ``pg_monitor``), the cluster's system identifier and
  the server's timeline. ``Replication`` is that reading; the store reports it at open
  (``PostgresStateStore.replication``, the INFO log, ``ctrlrun verify`` and ``conformance``).
* **Required synchronous replication** (``Durability.require_sync``, URL parameter
  ``ctrlrun_require_sync=true``): a writing connection to a server whose COMMIT would not wait
  for a standby — ``synchronous_commit`` ``off`` or ``local``, or no
  ``synchronous_standby_names`` — or that shows no synchronous standby attached, is refused
  with ``ReplicationRefused`` before anything is written.
* **Split brain.** A writing connection records, per cluster (system identifier), the newest
  timeline this process has written on; a later connection to the same cluster on an older
  timeline — a failed-over primary that came back writable — is refused with
  ``StaleTimeline``. Process-wide: every store handle of the process shares what it learned.
* **A landed write whose replication is unconfirmed.** After a COMMIT that went unanswered
  (or was answered without confirmation: ``commitwatch``), the re-read on the primary sees a
  locally committed row whether or not a standby has it. ``confirm_replicated`` commits one
  WAL record of no consequence (``replication_barrier``) on the re-read's connection, under
  the same bound: WAL replicates in order, so a clean answer proves the earlier COMMIT
  replicated too. Only where a COMMIT waits for standbys; elsewhere there is nothing more to
  learn.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Final

import psycopg

from ctrlrun.errors.replication import ReplicationReason, ReplicationRefused, StaleTimeline
from ctrlrun.store.postgres.commitwatch import WATCH, listen
from ctrlrun.store.postgres.connections import Connection
from ctrlrun.store.postgres.durability import Durability, Replication

log = logging.getLogger("ctrlrun.postgres")


def read_replication(conn: Connection, queries: dict[str, str]) -> Replication:
    """``replication_probe`` on ``conn`` (outside any transaction); where the role may not
    read the cluster's identity, ``replication_probe_settings`` (no timeline: the split-brain
    check then has nothing to compare, which the open logs)."""
    try:
        row = conn.execute(queries["replication_probe"]).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        log.warning(
            "ctrlrun.postgres: the role may not read the cluster's identity"
            " (pg_control_system, pg_walfile_name): the old-primary timeline check is off;"
            " grant EXECUTE on them to turn it on"
        )
        row = conn.execute(queries["replication_probe_settings"]).fetchone()
    assert row is not None
    timeline = row["timeline"]
    return Replication(
        synchronous_commit=_text(row["synchronous_commit"]),
        synchronous_standby_names=_text(row["synchronous_standby_names"]),
        standbys=int(row["standbys"]),
        sync_standbys=int(row["sync_standbys"]) if row["sync_visible"] else None,
        system_identifier=str(row["system_identifier"] or ""),
        timeline=int(timeline) if timeline is not None else None,
    )


def _text(value: object) -> str:
    """A setting's text (bytes in a SQL_ASCII database, which the open then refuses)."""
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


class Timelines:
    """The newest timeline this process has written on, per cluster (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._newest: dict[str, int] = {}

    def admit(self, seen: Replication, where: str) -> None:
        """Record ``seen``'s timeline, or raise ``StaleTimeline`` if it is older than one
        already written on in the same cluster."""
        if seen.timeline is None:
            return
        with self._lock:
            newest = self._newest.get(seen.system_identifier, seen.timeline)
            if seen.timeline < newest:
                raise StaleTimeline(
                    f"{where}: the server is on timeline {seen.timeline} of cluster"
                    f" {seen.system_identifier}, and this process has written on timeline"
                    f" {newest} of it: an old primary came back writable after a failover"
                    " (split brain). Nothing was written here. Fence it or rebuild it as a"
                    " standby (pg_rewind), and point the URL at the current primary",
                    system_identifier=seen.system_identifier,
                    timeline=seen.timeline,
                    highest=newest,
                )
            self._newest[seen.system_identifier] = max(newest, seen.timeline)


TIMELINES: Final = Timelines()


def check_required(seen: Replication, durability: Durability, where: str) -> None:
    """``ReplicationRefused`` when synchronous replication is required and ``seen`` is not."""
    if not durability.require_sync or seen.timeline is None:
        return
    if not seen.waits_for_standby:
        raise ReplicationRefused(
            f"{where}: synchronous replication is required (ctrlrun_require_sync), and a COMMIT"
            f" here would not wait for a standby (synchronous_commit="
            f"{seen.synchronous_commit}, synchronous_standby_names="
            f"{seen.synchronous_standby_names!r}); nothing was written",
            reason=ReplicationReason.NOT_SYNCHRONOUS,
        )
    if seen.sync_standbys == 0 or seen.standbys == 0:
        raise ReplicationRefused(
            f"{where}: synchronous replication is required (ctrlrun_require_sync), and no"
            " synchronous standby is attached: every COMMIT would wait; nothing was written",
            reason=ReplicationReason.NO_STANDBY,
        )


_SEEN: weakref.WeakKeyDictionary[Connection, Replication] = weakref.WeakKeyDictionary()


class ReplicationGuard:
    """Run on every new connection of a store handle (``Connections(on_connect=…)``): listen
    for its notices, read its replication, and, for a writing handle, refuse a server that
    fails ``check_required`` or ``Timelines.admit``. ``latest`` is the newest reading."""

    def __init__(self, queries: dict[str, str], durability: Durability, *, writing: bool) -> None:
        self.queries, self.durability, self.writing = queries, durability, writing
        self.latest: Replication | None = None

    def __call__(self, conn: Connection) -> None:
        listen(conn)
        seen = read_replication(conn, self.queries)
        _SEEN[conn] = seen
        self.latest = seen
        if self.writing:
            where = f"database {conn.info.dbname!r}"
            check_required(seen, self.durability, where)
            TIMELINES.admit(seen, where)


def confirm_replicated(conn: Connection, queries: dict[str, str], bound: float | None) -> str:
    """Commit ``replication_barrier`` on ``conn`` when its server's COMMITs wait for standbys;
    return ``""`` when it was confirmed (or there is nothing to confirm), else the doubt."""
    seen = _SEEN.get(conn)
    if seen is None or not seen.waits_for_standby:
        return ""
    conn.execute("BEGIN")
    conn.execute(queries["replication_barrier"])
    _, doubt = WATCH.run(conn, lambda: conn.execute("COMMIT"), bound)
    return doubt


def probe(url: str) -> Replication:
    """The replication of the server ``url`` names (a driver URL), on a connection of its
    own; opens no store. For reports (``ctrlrun verify``, ``ctrlrun conformance``)."""
    import psycopg
    from psycopg.rows import dict_row

    from ctrlrun.store.postgres.sqltext import queries_for

    with psycopg.connect(
        url, autocommit=True, prepare_threshold=None, row_factory=dict_row
    ) as conn:
        return read_replication(conn, queries_for("public"))
