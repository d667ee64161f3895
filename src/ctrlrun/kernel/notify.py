"""Who is told, and of what: webhook targets, and the outbox message each event leaves.

A policy's ``notify:`` section names targets and the kinds of event each wants
(``approval``: a new approval request; ``ambiguous``: an effect whose outcome is unknown).
Each such event enqueues one outbox message per target in the same transaction as the event,
so a crash loses neither. The message names its target and carries the event's facts, and
nothing else: the URL, the format and the signing secret's variable come from the policy the
dispatcher loads at delivery (``ctrlrun notify``), never from the store, so a store writer can
neither redirect a message nor choose what signs it. Targets are not decision inputs: they are
not part of the policy hash. Pure values; no I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final
from urllib.parse import urlsplit

from ctrlrun.errors import InvalidArgument

TOPIC: Final = "ctrlrun.approval.requested"
AMBIGUOUS_TOPIC: Final = "ctrlrun.effect.ambiguous"
TOPICS: Final = (TOPIC, AMBIGUOUS_TOPIC)
EVENT_TYPE: Final = "approval.requested"
AMBIGUOUS_EVENT_TYPE: Final = "effect.ambiguous"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENV: Final = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


class NotifyKind(StrEnum):
    """What a target is told of (``events:``; default ``[approval]``)."""

    APPROVAL = "approval"  # a new approval request
    AMBIGUOUS = "ambiguous"  # a new AMBIGUOUS effect: a person must find out what happened


TOPIC_OF: Final = {NotifyKind.APPROVAL: TOPIC, NotifyKind.AMBIGUOUS: AMBIGUOUS_TOPIC}


class BodyFormat(StrEnum):
    """What a target receives: the event as JSON, or a Slack-compatible ``{"text": …}``."""

    STANDARD = "standard"
    SLACK = "slack"


@dataclass(frozen=True, slots=True)
class NotifyTarget:
    """One webhook: ``name`` (unique in the policy), ``url`` (http or https), the environment
    variable holding its Standard Webhooks secret (``whsec_…``; read by the dispatcher,
    never stored), its body ``format`` and the ``events`` it is told of. Only ``name`` is
    ever written to the store."""

    name: str
    url: str
    secret_env: str
    format: BodyFormat = BodyFormat.STANDARD
    events: tuple[NotifyKind, ...] = (NotifyKind.APPROVAL,)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise InvalidArgument(
                f"a notify target name is 1-64 of A-Z a-z 0-9 . _ -, got {self.name!r}"
            )
        if not _is_web_url(self.url):
            raise InvalidArgument(f"a notify url is http(s)://host/…, got {self.url!r}")
        if not isinstance(self.secret_env, str) or not _ENV.fullmatch(self.secret_env):
            raise InvalidArgument(
                f"secret_env names an environment variable (A-Z, 0-9, _), got {self.secret_env!r}"
            )
        object.__setattr__(self, "format", BodyFormat(self.format))
        kinds = tuple(dict.fromkeys(NotifyKind(kind) for kind in self.events))
        if not kinds:
            raise InvalidArgument(f"notify target {self.name!r} must name at least one event")
        object.__setattr__(self, "events", kinds)

    def to_dict(self) -> dict[str, Any]:
        """The target as the policy states it (for showing the policy; a message in the store
        carries the ``name`` alone)."""
        return {
            "name": self.name,
            "url": self.url,
            "secret_env": self.secret_env,
            "format": self.format.value,
            "events": [kind.value for kind in self.events],
        }

    def wants(self, kind: NotifyKind) -> bool:
        """Whether this target is told of ``kind``."""
        return kind in self.events


_TARGET_KEYS: Final = ("name", "url", "secret_env", "format", "events")


def _is_web_url(url: object) -> bool:
    """Whether ``url`` is an http(s) URL with a host and a readable port. ``urlsplit`` raises
    ``ValueError`` on a broken IPv6 bracket (``http://[``) and ``.port`` on a port that is not
    a number: both are a bad URL here, never an exception of their own."""
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        return False


def parse_targets(value: object) -> tuple[NotifyTarget, ...]:
    """The ``notify:`` list of a policy: ``[{name, url, secret_env, format?, events?}]``."""
    if not isinstance(value, list):
        raise InvalidArgument("notify is a list of targets ({name, url, secret_env, format})")
    targets = [_target(item) for item in value]
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise InvalidArgument("notify target names must be unique")
    return tuple(targets)


def _target(item: object) -> NotifyTarget:
    if not isinstance(item, dict) or not {"name", "url", "secret_env"} <= set(item):
        raise InvalidArgument("each notify target needs name, url and secret_env")
    unknown = set(item) - set(_TARGET_KEYS)
    if unknown:
        raise InvalidArgument(f"unknown notify key(s): {', '.join(sorted(unknown))}")
    try:
        form = BodyFormat(item.get("format", "standard"))
    except ValueError as exc:
        raise InvalidArgument(f"format is standard or slack, got {item.get('format')!r}") from exc
    events = item.get("events", [NotifyKind.APPROVAL.value])
    kinds = ", ".join(kind.value for kind in NotifyKind)
    known = {kind.value for kind in NotifyKind}
    if not isinstance(events, list) or not all(isinstance(e, str) and e in known for e in events):
        raise InvalidArgument(f"events is a list of {kinds}; got {events!r}")
    return NotifyTarget(item["name"], item["url"], item["secret_env"], form, tuple(events))


@dataclass(frozen=True, slots=True)
class Notice:
    """One outbox message to enqueue with the event it tells of: the ``topic``, the payload
    (the target's name and the event) and its ``dedupe_key``."""

    topic: str
    payload: dict[str, Any]
    dedupe_key: str


def notices(
    targets: Iterable[NotifyTarget], kind: NotifyKind, event: dict[str, Any], subject: str
) -> tuple[Notice, ...]:
    """One ``Notice`` per target told of ``kind``, deduplicated per ``subject`` and target.
    The payload names the target; where and how it is delivered is the policy's, at delivery."""
    return tuple(
        Notice(TOPIC_OF[kind], {"target": t.name, "event": event}, f"{subject}/{t.name}")
        for t in targets
        if t.wants(kind)
    )


def told_of(targets: Iterable[NotifyTarget], kind: NotifyKind) -> tuple[NotifyTarget, ...]:
    """The targets among ``targets`` told of ``kind``."""
    if targets == ():  # most policies notify nobody: asked on every call (no generator made)
        return ()
    return tuple(target for target in targets if target.wants(kind))


def target_name(payload: dict[str, Any]) -> str | None:
    """The target a message names (a message written before targets were named by name alone
    carries a mapping: only its ``name`` is read, never its URL or secret variable)."""
    target = payload.get("target")
    if isinstance(target, dict):
        target = target.get("name")
    return target if isinstance(target, str) and _NAME.fullmatch(target) else None


def shown_payload(topic: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as a surface may show it: a notification's target by name only (a message
    written before targets were named by name alone carried the URL, a credential for Slack,
    and the secret's variable; neither is ever shown)."""
    if topic not in TOPICS or not isinstance(payload.get("target"), dict):
        return payload
    return {**payload, "target": target_name(payload)}
