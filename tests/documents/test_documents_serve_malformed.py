"""A malformed chunked body sent to a real ``ctrlrun serve``: answered ``400`` by the server,
one warning line in its log and never a traceback (a fuzzing find: uvicorn answered 400
while the app still held the request, and the app's own answer then logged "Exception in
ASGI application" with h11's ``LocalProtocolError``, one traceback per request)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CTRLRUN = str(Path(sys.executable).with_name("ctrlrun"))
BROKEN_CHUNK = b"zz\r\n{}\r\n0\r\n\r\n"  # a chunk size that is not hex


class Server:
    def __init__(self, port: int) -> None:
        self.port = port
        self.log = ""


@contextmanager
def serving(tmp_path: Path) -> Iterator[Server]:
    """A real ``ctrlrun serve`` on a free loopback port; its whole stderr lands in ``.log``
    once it has stopped."""
    process = subprocess.Popen(
        [CTRLRUN, "serve", "--port", "0", "--store-url", f"sqlite:///{tmp_path}/s.db"],
        stderr=subprocess.PIPE,
        text=True,
    )
    first = process.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/api/documents", first)
    assert found, first
    server = Server(int(found.group(1)))
    try:
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        server.log = first + process.communicate(timeout=30)[1]


def head(port: int, media: str) -> bytes:
    return (
        f"POST /api/documents HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: {media}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()


def exchange(port: int, *parts: bytes, wait_for: bytes | None = None) -> bytes:
    """Send ``parts`` (after the first, once ``wait_for`` has arrived), then read until the
    server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.settimeout(10)
        received = b""
        for index, part in enumerate(parts):
            while index and wait_for is not None and wait_for not in received:
                received += sock.recv(65536)
            sock.sendall(part)
        while chunk := sock.recv(65536):
            received += chunk
    return received


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


@pytest.mark.parametrize("media", ["application/json", "text/plain"])
def test_a_malformed_chunked_body_is_a_400_without_a_traceback(tmp_path, media):
    # text/plain: the app answers 415 at once, racing uvicorn's own 400 for the bad chunk
    with serving(tmp_path) as server:
        for _ in range(20):
            answer = exchange(server.port, head(server.port, media) + BROKEN_CHUNK)
            assert status(answer) == 400, answer
        ok = exchange(
            server.port,
            b"GET /api/documents/none HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Connection: close\r\n\r\n" % server.port,
        )
        assert status(ok) == 404  # still serving
    assert "Traceback" not in server.log, server.log
    assert "Exception in ASGI application" not in server.log
    assert server.log.count("Invalid HTTP request received") == 20  # one line each, no more


def test_garbage_after_the_app_answered_closes_quietly(tmp_path):
    # the app refused the body (415) without reading it; the broken chunk arrives afterwards,
    # when no second answer can be sent
    with serving(tmp_path) as server:
        answer = exchange(
            server.port,
            head(server.port, "text/plain"),
            BROKEN_CHUNK,
            wait_for=b"unsupported_media_type",
        )
        assert status(answer) == 415
    assert "Traceback" not in server.log, server.log
    assert "data_received() call failed" not in server.log
