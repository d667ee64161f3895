"""Who is told that an approval waits: webhook targets, and the message each one gets.

A policy's ``notify:`` section names targets; each new approval request enqueues one outbox
message per target in the same transaction as the request, so a crash loses neither. The
dispatcher (``ctrlrun notify``) POSTs them signed per Standard Webhooks. Targets are not
decision inputs: they are not part of the policy hash. Pure values; no I/O here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final
from urllib.parse import urlsplit

from ctrlrun._time import encode_instant
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.action import recomputed_hash

TOPIC: Final = "ctrlrun.approval.requested"
EVENT_TYPE: Final = "approval.requested"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENV: Final = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


class BodyFormat(StrEnum):
    """What a target receives: the event as JSON, or a Slack-compatible ``{"text": …}``."""

    STANDARD = "standard"
    SLACK = "slack"


@dataclass(frozen=True, slots=True)
class NotifyTarget:
    """One webhook: ``name`` (unique in the policy), ``url`` (http or https), the environment
    variable holding its Standard Webhooks secret (``whsec_…``; read by the dispatcher,
    never stored), and its body ``format``."""

    name: str
    url: str
    secret_env: str
    format: BodyFormat = BodyFormat.STANDARD

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise InvalidArgument(
                f"a notify target name is 1-64 of A-Z a-z 0-9 . _ -, got {self.name!r}"
            )
        parts = urlsplit(self.url) if isinstance(self.url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidArgument(f"a notify url is http(s)://host/…, got {self.url!r}")
        if not isinstance(self.secret_env, str) or not _ENV.fullmatch(self.secret_env):
            raise InvalidArgument(
                f"secret_env names an environment variable (A-Z, 0-9, _), got {self.secret_env!r}"
            )
        object.__setattr__(self, "format", BodyFormat(self.format))

    def to_dict(self) -> dict[str, str]:
        """The target as the outbox message carries it."""
        return {
            "name": self.name,
            "url": self.url,
            "secret_env": self.secret_env,
            "format": self.format.value,
        }


def parse_targets(value: object) -> tuple[NotifyTarget, ...]:
    """The ``notify:`` list of a policy: ``[{name, url, secret_env, format?}]``."""
    if not isinstance(value, list):
        raise InvalidArgument("notify is a list of targets ({name, url, secret_env, format})")
    targets = []
    for item in value:
        if not isinstance(item, dict) or not {"name", "url", "secret_env"} <= set(item):
            raise InvalidArgument("each notify target needs name, url and secret_env")
        unknown = set(item) - {"name", "url", "secret_env", "format"}
        if unknown:
            raise InvalidArgument(f"unknown notify key(s): {', '.join(sorted(unknown))}")
        try:
            form = BodyFormat(item.get("format", "standard"))
        except ValueError as exc:
            raise InvalidArgument(
                f"format is standard or slack, got {item.get('format')!r}"
            ) from exc
        targets.append(NotifyTarget(item["name"], item["url"], item["secret_env"], form))
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise InvalidArgument("notify target names must be unique")
    return tuple(targets)


_ACTION_KEYS: Final = ("name", "arguments", "principal", "resource", "environment")
TAMPERED_TYPE: Final = "approval.tampered"


def checked_event(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` if its action still hashes to the ``action_hash`` it names; otherwise a
    ``approval.tampered`` event that shows no action (what it would show is not what a grant
    binds), only the request, both hashes and a warning for a person."""
    data = event.get("data") or {}
    found = recomputed_hash(data.get("action") or {})
    if found is not None and found == data.get("action_hash"):
        return event
    return {
        "type": TAMPERED_TYPE,
        "timestamp": event.get("timestamp"),
        "data": {
            "approval_id": data.get("approval_id"),
            "action_hash": data.get("action_hash"),
            "recomputed_hash": found,
            "summary": (
                "TAMPERED: this notification's action does not hash to the action the request"
                " binds; do not approve it"
            ),
        },
    }


def approval_event(
    *,
    approval_id: str,
    action: dict[str, Any],
    action_hash: str,
    policy_hash: str,
    expires_at: datetime,
    summary: str,
    created_at: datetime,
) -> dict[str, Any]:
    """The event a target receives for a new approval request (Standard Webhooks shape:
    ``type``, ``timestamp``, ``data``)."""
    return {
        "type": EVENT_TYPE,
        "timestamp": encode_instant(created_at),
        "data": {
            "approval_id": approval_id,
            "action": {k: action.get(k) for k in _ACTION_KEYS},
            "action_hash": action_hash,
            "policy_hash": policy_hash,
            "expires_at": encode_instant(expires_at),
            "summary": summary,
        },
    }


def slack_body(event: dict[str, Any]) -> dict[str, str]:
    """A Slack-compatible body for ``event``: one ``text`` a channel shows as it is (Slack
    renders ``<``, ``>`` and ``&`` as markup, so they are escaped)."""
    checked = checked_event(event)
    data = checked["data"]
    if checked is not event:
        text = f"TAMPERED approval request ({data['approval_id']}): {data['summary']}"
    else:
        text = (
            f"Approval needed ({data['approval_id']}, expires {data['expires_at']}):"
            f" {data['summary']}"
        )
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return {"text": escaped}
