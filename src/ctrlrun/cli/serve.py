"""``ctrlrun serve``: the documents HTTP API over the operator's store (extra ``ctrlrun[server]``).

Loopback only unless ``--allow-remote``: the API has no authentication (``X-Ctrlrun-Writer`` is
an assertion), so exposing it is a decision someone must make out loud.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import click

from ctrlrun.cli.common import Refusal, checked_store_url
from ctrlrun.errors import CtrlrunError, MissingDependency

DEFAULT_PORT = 8737


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address literal (names are not resolved:
    a name could resolve elsewhere tomorrow)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(2048)  # connections queue from now on, so the address printed is usable at once
    return sock


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
def serve(
    host: str, port: int, store_url: str, allow_remote: bool, max_body_bytes: int | None
) -> None:
    """Serve versioned documents over HTTP (GET/PUT /api/documents/{id}, …).

    Writers name themselves with the X-Ctrlrun-Writer header: an assertion recorded in the
    history, not authentication.
    """
    if not is_loopback(host) and not allow_remote:
        raise Refusal(
            f"refusing to listen on {host}: the documents API has no authentication;"
            " pass --allow-remote to expose it anyway"
        )
    try:
        import uvicorn

        from ctrlrun.documents.server import create_app
    except MissingDependency as exc:
        raise Refusal(str(exc)) from None
    except ModuleNotFoundError as exc:
        missing = MissingDependency(module=(exc.name or "uvicorn").split(".")[0], extra="server")
        raise Refusal(str(missing)) from None
    from ctrlrun.documents.store import DocumentStore
    from ctrlrun.store import open_store

    try:
        state: Any = open_store(store_url)
        sock = _bind(host, port)
    except (CtrlrunError, OSError) as exc:
        raise Refusal(str(exc)) from None
    app = create_app(DocumentStore(state), max_body_bytes=max_body_bytes)
    bound_host, bound_port = sock.getsockname()[:2]
    click.echo(f"serving documents on http://{bound_host}:{bound_port}/api/documents", err=True)
    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        state.close()
