"""``ctrlrun serve`` against raw sockets: only requests addressed to it by name are answered
(DNS rebinding), a foreign ``Origin`` is refused, idle and crawling connections are closed,
concurrency is bounded, and a ``Content-Length`` that is not ASCII digits is a 400."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctrlrun.documents.server import create_app
from ctrlrun.documents.store import DocumentStore
from ctrlrun.loopback import host_allowed, origin_allowed, served_names
from ctrlrun.store.sqlite import SQLiteStateStore

CTRLRUN = str(Path(sys.executable).with_name("ctrlrun"))


@contextmanager
def serving(tmp_path: Path, *options: str) -> Iterator[int]:
    """A real ``ctrlrun serve`` on 127.0.0.1 (a free port); yields the port; SIGTERM at the end."""
    server = subprocess.Popen(
        [CTRLRUN, "serve", "--port", "0", "--store-url", f"sqlite:///{tmp_path}/s.db", *options],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/api/documents", line)
        assert found, line
        yield int(found.group(1))
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def answer(sock: socket.socket) -> tuple[int, dict]:
    """Read one whole response (until the server closes): its status and JSON body."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body.startswith(b"{") else {}


def request(port: int, *headers: str, method: str = "GET", body: bytes = b"") -> tuple[int, dict]:
    path = "/api/documents" if method == "POST" else "/api/documents/nothere"
    lines = [f"{method} {path} HTTP/1.1", *headers, "Connection: close"]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    with connect(port) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body)
        return answer(sock)


def test_only_a_host_naming_this_server_is_answered(tmp_path):
    with serving(tmp_path) as port:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}"):
            assert request(port, f"Host: {host}")[0] == 404, host  # answered: no such document
        for host in (
            f"evil.example:{port}",
            f"127.0.0.1.evil.example:{port}",
            "127.0.0.1",
            f"127.0.0.1:{port + 1}",
            f"127.0.0.2:{port}",
            f"localhost.:{port}",
        ):
            status, body = request(port, f"Host: {host}")
            assert (status, body.get("error")) == (403, "forbidden_host"), host
        with connect(port) as sock:  # HTTP/1.0 without any Host
            sock.sendall(b"GET /api/documents/nothere HTTP/1.0\r\n\r\n")
            assert answer(sock)[0] == 403


def test_a_foreign_origin_is_refused_and_writes_nothing(tmp_path):
    with serving(tmp_path) as port:
        host = f"Host: 127.0.0.1:{port}"
        create = json.dumps({"id": "notes", "content": {"a": 1}}).encode()
        for origin in ("http://evil.example", "null", f"http://localhost:{port}"):
            status, body = request(port, host, f"Origin: {origin}", method="POST", body=create)
            assert (status, body.get("error")) == (403, "forbidden_origin"), origin
        assert request(port, host)[0] == 404
        status, _ = request(
            port, host, f"Origin: http://127.0.0.1:{port}", method="POST", body=create
        )
        assert status == 201  # the server's own origin, and the first create that landed


def test_an_idle_or_crawling_connection_is_closed(tmp_path):
    with serving(tmp_path, "--timeout", "1") as port:
        started = time.monotonic()
        with connect(port) as idle:
            assert idle.recv(1) == b""  # closed by the server, having said nothing
        assert time.monotonic() - started < 8
        head = f"GET /api/documents/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Pad: {'a' * 60}"
        started = time.monotonic()
        with connect(port) as crawler:
            closed = False
            for byte in head.encode():  # a byte every 0.1 s: 8 s for the whole head
                try:
                    crawler.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                time.sleep(0.1)
            assert closed or crawler.recv(1) == b""
        assert time.monotonic() - started < 6  # cut at the 1 s deadline, not at the end
        with connect(port) as slow_body:
            slow_body.sendall(
                f"PUT /api/documents/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode()
            )
            status, body = answer(slow_body)
            assert (status, body["error"]) == (408, "request_timeout")


def test_concurrency_is_bounded(tmp_path):
    with serving(tmp_path, "--max-connections", "2", "--timeout", "60") as port:
        held = [connect(port), connect(port)]
        try:
            status, _ = request(port, f"Host: 127.0.0.1:{port}")
            assert status == 503
            held[0].sendall(
                f"GET /api/documents/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
            )
            assert held[0].recv(12) == b"HTTP/1.1 404"  # the connections it holds are served
        finally:
            for sock in held:
                sock.close()


@pytest.mark.parametrize("declared", ["١٢", "+5", "-1", "0x5", "5 5", "1e3"])
def test_a_content_length_that_is_not_ascii_digits_is_a_400(tmp_path, declared):
    with serving(tmp_path) as port, connect(port) as sock:
        sock.sendall(
            f"PUT /api/documents/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n".encode()
        )
        assert answer(sock)[0] == 400


def asgi_put(app, headers: list[tuple[bytes, bytes]], body: bytes) -> int:
    """One PUT through the ASGI app itself (no HTTP parser in front): its status."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "PUT",
        "path": "/api/documents/x",
        "raw_path": b"/api/documents/x",
        "query_string": b"",
        "headers": headers,
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 1),
        "client": ("127.0.0.1", 2),
        "root_path": "",
    }
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"]


def test_the_app_itself_refuses_a_non_ascii_content_length(tmp_path):
    state = SQLiteStateStore(tmp_path / "s.db")
    try:
        app = create_app(DocumentStore(state))
        body = b'{"content": {}}'
        typed = [(b"content-type", b"application/json")]
        for digits in (b"\xb2", b"1\xb2"):  # '²' (latin-1): str.isdigit() is true, int() fails
            assert asgi_put(app, [*typed, (b"content-length", digits)], body) == 400
        assert asgi_put(app, [*typed, (b"content-length", b"15")], body) == 428  # read: no version
    finally:
        state.close()


def test_the_host_and_origin_checks_are_pure():
    names = served_names("127.0.0.1", 8737)
    assert names == {"127.0.0.1:8737", "localhost:8737"}
    assert served_names("::1", 80) == {"[::1]:80", "localhost:80", "[::1]", "localhost"}
    assert host_allowed("LOCALHOST:8737", names) and not host_allowed(None, names)
    assert not host_allowed("localhost :8737", names) and host_allowed("any:1", None)
    assert origin_allowed(None, "localhost:8737")
    assert origin_allowed("http://localhost:8737", "localhost:8737")
    assert not origin_allowed("https://localhost:8737", "localhost:8737")
    assert not origin_allowed("null", "localhost:8737")
