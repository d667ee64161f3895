"""Which HTTP client errors prove a request never left, for ``httpx`` and ``requests``.

An executor that raises anything but ``NotExecuted`` leaves its effect AMBIGUOUS: ctrlrun
cannot know whether the remote acted, so a person must settle it before the key runs again.
Most transport errors deserve that: a reset, a read timeout or a protocol error may come after
the server read the request. A few prove the opposite, because they happen before the first
byte of the request is written: the name did not resolve, the connection was refused or timed
out, the TLS handshake failed, no pooled connection came free. ``sending()`` turns exactly
those into ``NotExecuted`` (FAILED, and a retry runs as the next attempt) and lets everything
else through unchanged. docs/transport.md has the table, each row tested against a real local
server.

Only evidence counts. An error is "never sent" when its type says so **and** nothing was
answered earlier in the same call: a redirect or an authentication round that was answered
(httpx's ``history``, requests' redirect handling) or an earlier attempt that urllib3 retried
after anything but a connect failure means a request did leave, so the error stays ambiguous.
Where that history cannot be found the answer is "maybe sent". Neither client is imported
here: an error from a client that is not loaded cannot be one of its errors.
"""

from __future__ import annotations

import socket
import ssl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from types import ModuleType
from typing import Any

from ctrlrun.errors import NotExecuted

__all__ = ["Unsent", "never_sent", "sending"]


class Unsent(StrEnum):
    """How a request was proven never to have left (``NotExecuted.unsent``)."""

    DNS_FAILED = "dns_failed"
    CONNECTION_REFUSED = "connection_refused"
    CONNECT_FAILED = "connect_failed"
    """The TCP connection was not established (network unreachable, reset during connect)."""
    CONNECT_TIMEOUT = "connect_timeout"
    TLS_HANDSHAKE_FAILED = "tls_handshake_failed"
    POOL_TIMEOUT = "pool_timeout"
    """No connection came free from the client's pool in time (httpx ``PoolTimeout``)."""
    UNSUPPORTED_PROTOCOL = "unsupported_protocol"
    """The URL's scheme has no transport (httpx ``UnsupportedProtocol``)."""


@contextmanager
def sending() -> Iterator[None]:
    """Run an HTTP request; an ``httpx`` or ``requests`` error that proves the request never
    left becomes ``NotExecuted`` (with ``unsent``, an ``Unsent``; the original error is its
    ``__cause__``), every other exception propagates unchanged (AMBIGUOUS). Works in sync and
    async executors alike::

        @ctrlrun.protect("stripe.refund")
        async def refund(payment_id: str, amount: int):
            with ctrlrun.transport.sending():
                return (await client.post(URL, json={...})).json()
    """
    try:
        yield
    except Exception as exc:
        kind = never_sent(exc)
        if kind is None:
            raise
        # the message names the kind only: a client's own text can carry the URL and its query
        raise NotExecuted(f"the request never left: {kind}", unsent=kind) from exc


def never_sent(exc: BaseException) -> Unsent | None:
    """How ``exc`` proves its request never left, or None when it does not (the request may
    have been sent, or ``exc`` is not an ``httpx``/``requests`` error)."""
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.HTTPError):
        return _httpx(exc, httpx)
    requests = sys.modules.get("requests")
    if requests is not None and isinstance(exc, requests.RequestException):
        return _requests(exc, requests)
    return None


# --- httpx --------------------------------------------------------------------------------


def _httpx(exc: BaseException, httpx: ModuleType) -> Unsent | None:
    if isinstance(exc, httpx.PoolTimeout):
        kind = Unsent.POOL_TIMEOUT
    elif isinstance(exc, httpx.ConnectTimeout):
        kind = Unsent.CONNECT_TIMEOUT
    elif isinstance(exc, httpx.ConnectError):  # only ever raised while connecting (TLS included)
        kind = _connect_kind(exc)
    elif isinstance(exc, httpx.UnsupportedProtocol):
        kind = Unsent.UNSUPPORTED_PROTOCOL
    else:
        return None
    return kind if _httpx_first_exchange(exc) else None


def _httpx_first_exchange(exc: BaseException) -> bool:
    """Whether the failing request was the first of its call: the client's redirect and auth
    loops each keep a ``history`` of the responses already received, and every one of them
    must be found empty (none found: not provable)."""
    histories = [
        values["history"]
        for module, _name, values in _frames(exc)
        if module == "httpx._client" and "history" in values
    ]
    return bool(histories) and all(isinstance(h, list) and not h for h in histories)


# --- requests / urllib3 -------------------------------------------------------------------


def _requests(exc: BaseException, requests: ModuleType) -> Unsent | None:
    urllib3 = sys.modules.get("urllib3")
    if urllib3 is None or not isinstance(exc, requests.ConnectionError):
        return None  # ReadTimeout, ChunkedEncodingError, …: the request may have left
    retried = exc.args[0] if exc.args else None
    if not isinstance(retried, urllib3.exceptions.MaxRetryError):
        return None  # a ProtocolError or OSError raised outright: after connecting
    kind = _urllib3_reason(retried.reason, urllib3)
    if kind is None or not _requests_first_exchange(exc, retried, urllib3):
        return None
    return kind


def _urllib3_reason(reason: Any, urllib3: ModuleType) -> Unsent | None:
    errors = urllib3.exceptions
    if isinstance(reason, errors.NameResolutionError):
        return Unsent.DNS_FAILED
    if isinstance(reason, errors.NewConnectionError):
        return _connect_kind(reason)
    if isinstance(reason, errors.ConnectTimeoutError):
        return Unsent.CONNECT_TIMEOUT
    if isinstance(reason, errors.SSLError) and _in_handshake(reason):
        return Unsent.TLS_HANDSHAKE_FAILED
    return None  # ProtocolError, ReadTimeoutError, ProxyError, a TLS error after the handshake


def _in_handshake(reason: BaseException) -> bool:
    """Whether urllib3's ``SSLError`` wraps an ``ssl`` error raised inside the handshake (its
    traceback reaches ``SSLSocket.do_handshake``); a TLS error while reading is not one."""
    original = reason.args[0] if reason.args else None
    if not isinstance(original, ssl.SSLError):  # CertificateError is one
        return False
    return any(module == "ssl" and name == "do_handshake" for module, name, _ in _frames(original))


def _requests_first_exchange(exc: BaseException, retried: BaseException, urllib3: Any) -> bool:
    """Whether no request of this call was answered or possibly sent before the failing one:
    not a redirect (``requests`` hands the adapter a new request), and every earlier attempt
    urllib3 retried failed to connect (the innermost ``urlopen`` frame's ``retries``). The
    adapter raised ``exc`` from ``retried``: the session's frames are in the first's
    traceback, urllib3's in the second's."""
    frames = [*_frames(exc), *_frames(retried)]
    sent = [v.get("request") for m, n, v in frames if m == "requests.sessions" and n == "send"]
    pools = [v for m, n, v in frames if m == "urllib3.connectionpool" and n == "urlopen"]
    if not sent or not pools or any(r is not sent[0] for r in sent):
        return False
    retries = pools[-1].get("retries")
    if not isinstance(retries, urllib3.util.Retry):
        return False
    return all(
        entry.status is None and _urllib3_reason(entry.error, urllib3) is not None
        for entry in retries.history
    )


# --- shared -------------------------------------------------------------------------------


def _connect_kind(exc: BaseException) -> Unsent:
    """Which connect failure ``exc`` (or an error it was raised from) is."""
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain is short; bound it anyway
        if seen is None:
            break
        if isinstance(seen, socket.gaierror):
            return Unsent.DNS_FAILED
        if isinstance(seen, ConnectionRefusedError):
            return Unsent.CONNECTION_REFUSED
        if isinstance(seen, ssl.SSLError):
            return Unsent.TLS_HANDSHAKE_FAILED
        seen = seen.__cause__ or seen.__context__
    text = str(exc).lower()
    if "refused" in text:
        return Unsent.CONNECTION_REFUSED
    return Unsent.CONNECT_FAILED


def _frames(exc: BaseException) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(module, function, locals)`` of every frame ``exc`` passed through, outermost first."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        yield frame.f_globals.get("__name__", ""), frame.f_code.co_name, frame.f_locals
        tb = tb.tb_next
