"""A policy file that is re-read when it changes, between calls, without a restart.

Each call asks ``PolicySource.refresh()``: one ``os.stat`` of the file, compared with what was
loaded (modification time in ns, size, inode). On a change the file is loaded again; a policy
that loads replaces the old one from the next call on. One that does not load (a YAML error, an
unknown key, a deleted file) is remembered as ``error``, logged once, and every call is denied
(``DenyReason.POLICY_UNLOADABLE``) until the file loads again: a half-edited policy must never
fall back to an older, possibly wider one.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from ctrlrun.errors import PolicyError
from ctrlrun.kernel.policy import Policy

log = logging.getLogger("ctrlrun")

Signature = tuple[int, int, int] | None


def signature(path: Path) -> Signature:
    """What identifies one version of the file cheaply; None when it cannot be stat'ed."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_mtime_ns, found.st_size, found.st_ino)


class PolicySource:
    """The policy loaded from ``path``, kept current by ``refresh``."""

    def __init__(self, path: Path, policy: Policy) -> None:
        self.path = path
        self.policy = policy
        self.error: PolicyError | None = None
        self._seen = signature(path)
        self._lock = threading.Lock()

    def refresh(self) -> Policy:
        """The current policy, re-read if the file changed. Raises nothing: a file that no
        longer loads leaves ``error`` set (and the last good ``policy`` unused by Control)."""
        now = signature(self.path)
        if now == self._seen:
            return self.policy
        with self._lock:
            if now != self._seen:
                self._reload(now)
        return self.policy

    def _reload(self, now: Signature) -> None:
        try:
            from ctrlrun.config import load_policy_file  # YAML loads with the first file read

            policy = load_policy_file(self.path)
        except Exception as exc:  # a loader bug must deny every call, not escape from each
            self.error = exc if isinstance(exc, PolicyError) else _unexpected(self.path, exc)
            log.error(
                "ctrlrun: policy %s no longer loads; every call is denied until it does: %s",
                self.path,
                exc,
            )
        else:
            if policy != self.policy or self.error is not None:
                log.warning("ctrlrun: policy %s reloaded (%s)", self.path, policy.policy_hash)
            self.policy, self.error = policy, None
        self._seen = now


def _unexpected(path: Path, exc: Exception) -> PolicyError:
    """A ``PolicyError`` for an exception the loader should have turned into one: the call
    is denied like any other unloadable policy, and the file is named."""
    return PolicyError(
        f"{path}: the policy could not be loaded ({type(exc).__name__}: {exc})", path=str(path)
    )
