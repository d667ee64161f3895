"""Who is acting, which approval they present, and the executor's idempotency token.

Context variables, so they follow the call through threads that copy the context and through
asyncio tasks, and never leak between unrelated calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.action import Principal
from ctrlrun.kernel.effect import idempotency_token_for

_principal: ContextVar[Principal | None] = ContextVar("ctrlrun_principal", default=None)
_approval: ContextVar[str | None] = ContextVar("ctrlrun_approval", default=None)
_holding: ContextVar[tuple[str, int] | None] = ContextVar("ctrlrun_holding", default=None)


@contextmanager
def context(agent: str, user: str | None = None) -> Iterator[Principal]:
    """Protected calls inside this block act as ``agent`` (on behalf of ``user``)."""
    reset = _principal.set(Principal(agent, user))
    try:
        yield _principal.get() or Principal(agent, user)
    finally:
        _principal.reset(reset)


@contextmanager
def with_approval(approval_id: str) -> Iterator[str]:
    """Protected calls inside this block present ``approval_id``. It must match the exact
    action, is single use, and expires."""
    if not isinstance(approval_id, str) or not approval_id:
        raise InvalidArgument(f"approval_id must be a non-empty string, got {approval_id!r}")
    reset = _approval.set(approval_id)
    try:
        yield approval_id
    finally:
        _approval.reset(reset)


def current_principal() -> Principal | None:
    """The principal bound by the innermost ``context``, if any."""
    return _principal.get()


def current_approval() -> str | None:
    """The approval presented by the innermost ``with_approval``, if any."""
    return _approval.get()


def hold(effect_key: str | None, attempt: int | None) -> Token[tuple[str, int] | None]:
    """While the executor runs: the reservation it holds, if any (the idempotency token is
    derived lazily); ``release`` the returned token after. A pair of calls rather than a
    context manager: this is on every protected call's hot path."""
    held = (effect_key, attempt) if effect_key is not None and attempt is not None else None
    return _holding.set(held)


def release(token: Token[tuple[str, int] | None]) -> None:
    """Leave the executor scope ``hold`` entered."""
    _holding.reset(token)


def idempotency_token() -> str:
    """Inside an executor holding a reservation: a UUID derived from ``(effect_key, attempt)``,
    to pass to a provider as its idempotency key. Raises ``InvalidArgument`` anywhere else."""
    held = _holding.get()
    if held is None:
        raise InvalidArgument(
            "idempotency_token() is only available inside an executor that holds an effect key"
        )
    return idempotency_token_for(*held)
