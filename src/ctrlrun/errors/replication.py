"""Refusals of a Postgres store that will not write under the replication it found."""

from __future__ import annotations

from enum import StrEnum

from ctrlrun.errors.core import StoreError


class ReplicationReason(StrEnum):
    """Why a store refused to write under the server's replication."""

    NOT_SYNCHRONOUS = "not_synchronous"  # required, but a COMMIT would not wait for a standby
    NO_STANDBY = "no_standby"  # required, and the server shows no synchronous standby attached
    STALE_TIMELINE = "stale_timeline"  # an older timeline of a cluster already written newer


class ReplicationRefused(StoreError):
    """The store will not write here: the server cannot make a COMMIT as durable as the store
    was told to require (``ctrlrun_require_sync``), or it is an old primary of a cluster this
    process has already written on a newer timeline. Nothing was written. ``reason`` is a
    ``ReplicationReason``."""

    reason: ReplicationReason

    def __init__(self, message: str, *, reason: ReplicationReason) -> None:
        super().__init__(message, reason=reason)


class StaleTimeline(ReplicationRefused):
    """The server is a primary of the same cluster (same system identifier) on an older
    timeline than one this process has written on: a failed-over primary that came back
    writable (split brain). ``timeline`` is the server's, ``highest`` the newest seen."""

    system_identifier: str
    timeline: int
    highest: int

    def __init__(
        self, message: str, *, system_identifier: str, timeline: int, highest: int
    ) -> None:
        StoreError.__init__(
            self,
            message,
            reason=ReplicationReason.STALE_TIMELINE,
            system_identifier=system_identifier,
            timeline=timeline,
            highest=highest,
        )
