"""Running an ASGI app on a socket ctrlrun bound, with bounds no client can stretch (extra
``ctrlrun[server]``: uvicorn and h11, imported here and nowhere else at import time).

* Every connection must deliver each request's head (request line and headers) within
  ``timeout`` seconds of connecting or of its previous response, however it trickles its
  bytes; a connection that idles or crawls past that is closed (uvicorn's own keep-alive timer
  is re-armed by every byte, so a slow client would hold it forever).
* At most ``max_connections`` connections are served at once; a request on one more is answered
  ``503`` at once.
* ``X-Forwarded-*`` headers are not trusted: no proxy stands in front of this server.
* A malformed request (a broken chunked body, say) is answered ``400`` by uvicorn, once, with
  one warning line and no traceback, whatever the app was doing with the request.

The body's own deadline is the app's (``documents.server`` reads it under ``timeout``).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


def deadline_protocol(timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol with an absolute deadline on every request head."""

    class Deadline(H11Protocol):
        _head: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the head is in: the app takes over
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's head has the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            # uvicorn answers a malformed request 400 itself, even while the app still owns
            # the request; the app's own answer would then meet h11 in MUST_CLOSE and log a
            # traceback per request (a log flood any client can cause). Mark the exchange
            # over for the app, and answer only if no response has begun.
            if self.cycle is not None:
                self.cycle.disconnected = True
            if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                super().send_400_response(msg)
            else:
                self.transport.close()

        def _arm(self) -> None:
            self._disarm()
            self._head = self.loop.call_later(timeout, self._expire)

        def _disarm(self) -> None:
            if self._head is not None:
                self._head.cancel()
                self._head = None

        def _expire(self) -> None:
            self._head = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return Deadline


def serve(app: Any, sock: socket.socket, *, timeout: float, max_connections: int) -> None:
    """Serve ``app`` on the listening ``sock`` until SIGINT/SIGTERM (see the module docstring
    for the bounds)."""
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        http=deadline_protocol(timeout),
        timeout_keep_alive=max(1, int(timeout)),
        limit_concurrency=max_connections + 1,  # uvicorn counts the arriving connection too
        proxy_headers=False,
        server_header=False,
    )
    uvicorn.Server(config).run(sockets=[sock])
