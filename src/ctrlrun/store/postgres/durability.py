"""What a Postgres store is told about durability, and what it reads about replication: plain
data, importable without the driver (``replication`` does the reading and the checks)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final

from ctrlrun.errors import InvalidArgument

DEFAULT_COMMIT_TIMEOUT: Final = 30.0
"""The default bound on one COMMIT's wait, in seconds (``commit_timeout``)."""

WAITING_LEVELS: Final = frozenset({"on", "remote_write", "remote_apply"})
"""``synchronous_commit`` values under which a COMMIT waits for the synchronous standbys."""


@dataclass(frozen=True, slots=True)
class Durability:
    """How a store treats the durability of its COMMITs.

    ``commit_timeout``: seconds one COMMIT may wait (for the standbys, or for a server that no
    longer answers) before its outcome is unknown; None waits as long as the server does.
    ``require_sync``: refuse to write where a COMMIT would not wait for a synchronous standby.
    """

    commit_timeout: float | None = DEFAULT_COMMIT_TIMEOUT
    require_sync: bool = False

    def __post_init__(self) -> None:
        bound = self.commit_timeout
        number = isinstance(bound, int | float) and not isinstance(bound, bool)
        if bound is not None and not (number and 0 < bound < 86_400):
            raise InvalidArgument(
                "commit_timeout must be a number of seconds above 0 and below 86400, or None"
            )


@dataclass(frozen=True, slots=True)
class Replication:
    """What a COMMIT on the server waits for, read on a connection (module docstring).

    ``sync_standbys`` is None when the role may not see the standbys' sync state (grant it
    ``pg_monitor``); ``timeline`` is None on a standby."""

    synchronous_commit: str
    synchronous_standby_names: str
    standbys: int
    sync_standbys: int | None
    system_identifier: str
    timeline: int | None

    @property
    def waits_for_standby(self) -> bool:
        """A COMMIT here waits for a synchronous standby's confirmation."""
        return self.synchronous_commit in WAITING_LEVELS and bool(
            self.synchronous_standby_names.strip()
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "waits_for_standby": self.waits_for_standby}

    def describe(self) -> str:
        """One line for a person."""
        sync = (
            "unknown (grant pg_monitor to see)"
            if self.sync_standbys is None
            else self.sync_standbys
        )
        mode = "synchronous" if self.waits_for_standby else "NOT synchronous (a failover can lose"
        mode += "" if self.waits_for_standby else " committed records)"
        return (
            f"{mode}: synchronous_commit={self.synchronous_commit},"
            f" synchronous_standby_names={self.synchronous_standby_names!r},"
            f" standbys attached={self.standbys}, synchronous={sync}, timeline={self.timeline}"
        )
