"""``ctrlrun serve``: the documents HTTP API over the operator's store (extra ``ctrlrun[server]``).

Loopback only unless ``--allow-remote``: the API has no authentication (``X-Ctrlrun-Writer`` is
an assertion), so exposing it is a decision someone must make out loud. On loopback, only
requests whose ``Host`` names this server are answered and a foreign ``Origin`` is refused
(``ctrlrun.loopback``: DNS rebinding); every request head must arrive within ``--timeout`` and
at most ``--max-connections`` are served at once (``ctrlrun.serving``).
"""

from __future__ import annotations

import socket
from typing import Any

import click

from ctrlrun.cli.common import Refusal, checked_store_url, say
from ctrlrun.errors import CtrlrunError, MissingDependency
from ctrlrun.loopback import HostGuard, is_loopback, served_names

DEFAULT_PORT = 8737

__all__ = ["DEFAULT_PORT", "is_loopback", "serve"]


def bind_listening(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and already listening (so the address printed is
    usable at once)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(2048)  # connections queue from now on, so the address printed is usable at once
    return sock


def _server_parts() -> tuple[Any, Any]:
    """``create_app`` and ``serving.serve``, or the install line of the missing extra."""
    try:
        from ctrlrun import serving
        from ctrlrun.documents.server import create_app
    except MissingDependency as exc:
        raise Refusal(str(exc)) from None
    except ModuleNotFoundError as exc:
        missing = MissingDependency(module=(exc.name or "uvicorn").split(".")[0], extra="server")
        raise Refusal(str(missing)) from None
    return create_app, serving.serve


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--store-url",
    envvar="CTRLRUN_STORE_URL",
    required=True,
    callback=checked_store_url,
    help="sqlite:///path or postgresql://…?ctrlrun_schema=… (or CTRLRUN_STORE_URL).",
)
@click.option("--allow-remote", is_flag=True, help="Listen on a non-loopback address.")
@click.option(
    "--max-body-bytes", type=click.IntRange(1024), default=None, help="Request body limit."
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    help="Seconds a request's head, and then its body, may take to arrive.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 10_000),
    default=64,
    show_default=True,
    help="Connections served at once; a request on one more is answered 503.",
)
def serve(  # noqa: PLR0917 - click passes one argument per option
    host: str,
    port: int,
    store_url: str,
    allow_remote: bool,
    max_body_bytes: int | None,
    timeout: float,
    max_connections: int,
) -> None:
    """Serve versioned documents over HTTP (GET/PUT /api/documents/{id}, …).

    Writers name themselves with the X-Ctrlrun-Writer header: an assertion recorded in the
    history, not authentication. On a loopback address only requests whose Host names this
    server (its address or localhost, with the port) are answered, and a browser request from
    another site (Origin) is refused: 403.
    """
    if not is_loopback(host) and not allow_remote:
        raise Refusal(
            f"refusing to listen on {host}: the documents API has no authentication;"
            " pass --allow-remote to expose it anyway"
        )
    create_app, run = _server_parts()
    from ctrlrun.documents.store import DocumentStore
    from ctrlrun.store import open_store

    try:
        state: Any = open_store(store_url)
        sock = bind_listening(host, port)
    except (CtrlrunError, OSError) as exc:
        raise Refusal(str(exc)) from None
    app = create_app(DocumentStore(state), max_body_bytes=max_body_bytes, body_timeout=timeout)
    bound_host, bound_port = sock.getsockname()[:2]
    names = served_names(bound_host, bound_port) if is_loopback(host) else None
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    say(f"serving documents on http://{shown}:{bound_port}/api/documents", err=True)
    try:
        run(HostGuard(app, names), sock, timeout=timeout, max_connections=max_connections)
    finally:
        state.close()
