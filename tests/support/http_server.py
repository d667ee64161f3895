"""A real uvicorn server on loopback for the documents tests, and a gate to order requests.

``ServerThread`` runs the app in a thread on a socket the test bound (so the port is known and
can be bound again after a stop). ``Gate`` is ASGI middleware that holds or spoils the next
request matching a method and a path, so tests order requests with events, never sleeps. A
server stopped while a request is held answers it with a 500 (uvicorn) or closes the
connection.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn

from ctrlrun.documents.server import create_app

Scope = dict[str, Any]


class Gate:
    """Holds or spoils one chosen request. Modes of ``arm``:

    * ``"before"``: the request waits before the app sees it;
    * ``"reply"``: the app handles it at once (a save commits, a read reads), and its reply
      waits; so a reply can be delivered after later ones;
    * ``"lose"``: the app handles it, and the reply is replaced by a 502, as a proxy in front
      would answer after its upstream timed out (the save landed; the client cannot know).

    ``arrived`` is set when the request reached the gate (for ``"reply"``: when its reply is
    being held); ``release()`` lets a held request or reply go on.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.arrived = threading.Event()
        self._armed: tuple[str, str, str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._open: asyncio.Event | None = None

    def arm(self, method: str, path_suffix: str = "", mode: str = "before") -> None:
        assert mode in ("before", "reply", "lose")
        self.arrived.clear()
        self._armed = (method, path_suffix, mode)

    def release(self) -> None:
        if self._loop is not None and self._open is not None:
            self._loop.call_soon_threadsafe(self._open.set)

    async def _hold(self) -> None:
        self._loop, self._open = asyncio.get_running_loop(), asyncio.Event()
        self.arrived.set()
        await self._open.wait()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        armed = self._armed
        if (
            scope["type"] != "http"
            or armed is None
            or scope["method"] != armed[0]
            or not scope["path"].endswith(armed[1])
        ):
            await self.app(scope, receive, send)
            return
        self._armed = None
        if armed[2] == "before":
            await self._hold()
            await self.app(scope, receive, send)
            return
        held: list[Any] = []

        async def keep(message: Any) -> None:
            held.append(message)

        await self.app(scope, receive, keep)
        if armed[2] == "lose":
            self.arrived.set()
            await send({"type": "http.response.start", "status": 502, "headers": []})
            await send({"type": "http.response.body", "body": b"bad gateway"})
            return
        await self._hold()
        for message in held:
            await send(message)


class ServerThread:
    def __init__(self, app: Any, port: int = 0) -> None:
        self.app, self.port = app, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, lifespan="off", log_level="critical", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:  # uvicorn offers no event to wait on
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.005)
        return self

    def stop(self, *, force: bool = False) -> None:
        """Stop serving; ``force`` cancels requests in flight instead of waiting for them."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._server.force_exit = force
        self._thread.join(timeout=15)
        assert not self._thread.is_alive(), "uvicorn did not stop"
        self._server = self._thread = None


class Served:
    """A ``DocumentStore``, the real app behind a ``Gate``, and uvicorn serving it."""

    def __init__(self, docs: Any, *, max_body_bytes: int | None = None) -> None:
        self.docs = docs
        self.gate = Gate(create_app(docs, max_body_bytes=max_body_bytes))
        self.server = ServerThread(self.gate).start()

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        """Stop serving, cancelling what is in flight (as a crash or a deploy would)."""
        self.server.stop(force=True)

    def start(self) -> None:
        """Serve again, on the same port."""
        self.server = ServerThread(self.gate, self.server.port).start()
