"""The proposed action: who wants to do what, to which resource, with which arguments.

An ``Action``'s identity as a *proposal* is its ``action_id`` (fresh per call); its identity as
*content* is ``action_hash``, the SHA-256 of its canonical form, which excludes the id. Approvals
bind to the hash; effect reservations bind to the effect key, never to the id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from ctrlrun.canonical import (
    canonical_bytes,
    canonical_text,
    is_plain,
    new_id,
    plain_text,
    sha256_hex,
    string_text,
)
from ctrlrun.errors import CtrlrunError, InvalidArgument
from ctrlrun.kernel.text import check_label, check_optional_label

ACTION_SCHEMA: Final = "ctrlrun.action/v1"
DEFAULT_ENVIRONMENT: Final = "production"

_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*\Z")
_ID: Final = re.compile(r"[A-Za-z0-9_.:-]{1,128}\Z")
_SCHEMA_TAIL: Final = f',"schema":{string_text(ACTION_SCHEMA)}}}'


def check_action_name(name: object) -> str:
    """``name`` if it is a dotted identifier (``stripe.refund``); ``InvalidArgument`` otherwise."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgument(f"action name must be dotted identifiers, got {name!r}")
    return name


def _non_empty(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{what} must be a non-empty string, got {value!r}")
    if "\n" in value or "\r" in value:
        raise InvalidArgument(f"{what} must be one line, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Principal:
    """On whose behalf an action is taken: the agent, and optionally the user it acts for."""

    agent: str
    user: str | None = None

    def __post_init__(self) -> None:
        check_label(self.agent, "principal agent")
        check_optional_label(self.user, "principal user")

    def to_dict(self) -> dict[str, str | None]:
        """The principal as it appears in the canonical form and on receipts."""
        return {"agent": self.agent, "user": self.user}

    @property
    def text(self) -> str:
        """``to_dict()`` as canonical JSON text (not UTF-8 checked: the action's bytes are)."""
        return _principal_text(self.agent, self.user)


_SCALARS: Final = frozenset({str, int, bool, type(None)})


def _flat_copy(arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """A private copy of arguments that are a ``dict`` of ``str`` keys and scalar values of
    exact plain types (the common case), in canonical key order — what parsing their
    canonical text back would give, without the parse; None for anything else."""
    if type(arguments) is not dict:
        return None
    for key, value in arguments.items():
        if type(key) is not str or type(value) not in _SCALARS:
            return None
        if type(value) is int and not is_plain(value):  # too many digits: the walk says so
            return None
    return dict(sorted(arguments.items()))


@lru_cache(maxsize=1024)
def _principal_text(agent: str, user: str | None) -> str:
    return plain_text({"agent": agent, "user": user})


@lru_cache(maxsize=1024)
def _document_tail(
    environment: str, name: str, agent: str, user: str | None, resource: str | None
) -> str:
    """The canonical text of an action document after its arguments: every other key sorts
    after ``arguments``, and these few values repeat from call to call, so they are encoded
    once per combination instead of once per call. (Keyed by plain strings, whose hashes are
    cached, rather than by the ``Principal``, whose hash is computed per call.)"""
    rest = {
        "environment": environment,
        "name": name,
        "principal": {"agent": agent, "user": user},
        "resource": resource,
        "schema": ACTION_SCHEMA,
    }
    return plain_text(rest)[1:]


class Action:
    """A proposed consequential call. Immutable; arguments are validated and copied at creation.

    Raises ``InvalidArgument`` for an empty or malformed name, principal, resource or
    environment, and for any argument without a canonical JSON form (floats included).
    """

    __slots__ = (
        "_args",
        "_args_text",
        "_canonical",
        "_flat",
        "_hash",
        "_text",
        "action_id",
        "environment",
        "name",
        "principal",
        "resource",
    )

    def __init__(
        self,
        name: str,
        arguments: Mapping[str, Any],
        principal: Principal,
        *,
        resource: str | None = None,
        environment: str = DEFAULT_ENVIRONMENT,
        action_id: str | None = None,
    ) -> None:
        if not isinstance(principal, Principal):
            raise InvalidArgument(f"principal must be a Principal, got {principal!r}")
        if type(arguments) is not dict and not isinstance(arguments, Mapping):  # ABC: ~0.2 us
            raise InvalidArgument(f"arguments must be a mapping, got {type(arguments).__name__}")
        self.name = check_action_name(name)
        self.principal = principal
        self.resource = check_optional_label(resource, "resource")
        self.environment = _non_empty(environment, "environment")
        if action_id is None:
            action_id = new_id("act")
        elif not isinstance(action_id, str) or not _ID.match(action_id):
            raise InvalidArgument(f"action_id must be 1-128 id characters, got {action_id!r}")
        self.action_id = action_id
        # One validating encode; the private copy is parsed back from it, so the caller's
        # objects are never shared and every later encode works on known-plain data. Flat
        # arguments (exact str keys, exact scalar values) are plain by their copy's
        # construction: encoded without the walk (text is checked as UTF-8 below).
        flat = _flat_copy(arguments)
        self._flat = flat is not None
        if flat is None:
            self._args_text = canonical_text(arguments, "arguments")
            self._args: dict[str, Any] = json.loads(self._args_text)
        else:
            self._args_text = plain_text(flat)
            self._args = flat
        # The document's canonical text, composed: the arguments are already canonical text
        # and every other key sorts after "arguments" (tests/unit/test_pinned_bytes.py).
        tail = _document_tail(
            self.environment, self.name, principal.agent, principal.user, self.resource
        )
        self._text = '{"arguments":' + self._args_text + "," + tail
        try:
            self._canonical = self._text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the validating encoder names where
            canonical_text(arguments, "arguments")  # in the arguments, named as before
            canonical_bytes(json.loads(self._text))
            raise  # pragma: no cover - canonical_bytes raised InvalidArgument
        self._hash = sha256_hex(self._canonical)

    @property
    def action_hash(self) -> str:
        """``sha256:<hex>`` of the canonical form (the action_id is not part of it)."""
        return self._hash

    @property
    def canonical(self) -> bytes:
        """The canonical bytes the hash is taken over."""
        return self._canonical

    @property
    def arguments(self) -> dict[str, Any]:
        """A fresh, plain copy of the canonical arguments (mutating it changes nothing)."""
        if self._flat:  # only immutable values: a shallow copy is a whole one
            return dict(self._args)
        return json.loads(self._args_text)  # type: ignore[no-any-return]

    canonical_arguments = arguments

    @property
    def arguments_text(self) -> str:
        """The canonical JSON text of the arguments."""
        return self._args_text

    @property
    def stored_text(self) -> str:
        """``canonical_text(self.to_dict())``, composed from the canonical form: ``action_id``
        sorts first and ``schema`` last, which ``to_dict`` leaves out."""
        body = self._text[1 : -len(_SCHEMA_TAIL)]
        return '{"action_id":' + string_text(self.action_id) + "," + body + "}"

    @property
    def plain_arguments(self) -> dict[str, Any]:
        """The action's own canonical arguments, without a copy: read, never mutate."""
        return self._args

    def argument(self, name: str) -> Any:
        """The argument ``name`` (KeyError if absent). Containers are shared: do not mutate."""
        return self._args[name]

    def has_argument(self, name: str) -> bool:
        """Whether the action carries an argument ``name``."""
        return name in self._args

    def to_dict(self) -> dict[str, Any]:
        """The stored form: the canonical document plus the action_id."""
        return {
            "action_id": self.action_id,
            "arguments": self.arguments,
            "environment": self.environment,
            "name": self.name,
            "principal": self.principal.to_dict(),
            "resource": self.resource,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Action:
        """Rebuild an action stored by ``to_dict`` (same id, same hash)."""
        principal = data["principal"]
        return cls(
            data["name"],
            data["arguments"],
            Principal(principal["agent"], principal.get("user")),
            resource=data.get("resource"),
            environment=data.get("environment", DEFAULT_ENVIRONMENT),
            action_id=data["action_id"],
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Action) and other.action_id == self.action_id

    def __hash__(self) -> int:
        return hash(self.action_id)

    def __repr__(self) -> str:
        return f"Action({self.name!r}, action_id={self.action_id!r}, hash={self._hash[:15]}…)"


_ANY_ID: Final = "act_recomputed"  # the hash excludes the id: any valid one rebuilds it


def recomputed_hash(document: Mapping[str, Any]) -> str | None:
    """The hash of the action a stored document describes (``Action.to_dict`` form, the
    ``action_id`` optional: the hash excludes it), or None if it does not rebuild into an
    action at all. What a person is shown of a stored request is checked with this."""
    try:
        principal = document["principal"]
        rebuilt = Action(
            document["name"],
            document["arguments"],
            Principal(principal["agent"], principal.get("user")),
            resource=document.get("resource"),
            environment=document.get("environment", DEFAULT_ENVIRONMENT),
            action_id=_ANY_ID,
        )
    except (CtrlrunError, KeyError, TypeError, AttributeError, ValueError):
        return None
    return rebuilt.action_hash
