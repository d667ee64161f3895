"""The documents HTTP API of a real ``ctrlrun serve``, fuzzed over a raw socket: every answer
is a well-formed HTTP response that is not a 500 and carries no traceback, the server's log
holds none either, no request hangs it, and a refused request leaves the store unchanged."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.fuzzing import budget

CTRLRUN = str(Path(sys.executable).with_name("ctrlrun"))


class Served:
    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process, self.port = process, port
        self.host = f"Host: 127.0.0.1:{port}"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    where = tmp_path_factory.mktemp("fuzz-serve")
    process = subprocess.Popen(
        [CTRLRUN, "serve", "--port", "0", "--timeout", "1", "--max-body-bytes", "4096",
         "--store-url", f"sqlite:///{where}/s.db"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    first = process.stderr.readline()
    port = int(re.search(r":(\d+)/api/documents", first).group(1))
    running = Served(process, port)
    status, _ = exchange(
        running, request(running, "POST", "/api/documents", b'{"id":"canary","content":{"n":1}}')
    )
    assert status == 201
    yield running
    process.send_signal(signal.SIGTERM)
    log = process.communicate(timeout=30)[1]
    assert "Traceback" not in log, log
    assert "Exception in ASGI" not in log, log


def request(served: Served, method: str, path: str, body: bytes, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", served.host, "Connection: close", *headers]
    if body and not any(
        h.lower().startswith(("content-length", "transfer-encoding")) for h in headers
    ):
        lines.append(f"Content-Length: {len(body)}")
    if body and not any(h.lower().startswith("content-type") for h in headers):
        lines.append("Content-Type: application/json")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogatepass") + body


def exchange(served: Served, raw: bytes) -> tuple[int | None, bytes]:
    """Send ``raw``; the status and body of the answer (None: closed without one)."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.settimeout(10)  # the server's own deadline is 1 s: longer means a hang
        with suppress(OSError):  # the server may answer and close before reading it all
            sock.sendall(raw)  # no half-close: uvicorn takes it for a client gone
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    if not data:
        return None, b""
    assert data.startswith(b"HTTP/1.1 "), data[:100]
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def canary_version(served: Served) -> int:
    status, body = exchange(served, request(served, "GET", "/api/documents/canary", b""))
    assert status == 200
    return int(json.loads(body)["version"])


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
BODIES = (
    st.binary(max_size=64)
    | JSONISH.map(lambda v: json.dumps(v).encode())
    | st.fixed_dictionaries(
        {}, optional={"id": st.text(max_size=8), "content": JSONISH, "expectedVersion": JSONISH}
    ).map(lambda v: json.dumps(v).encode())
    | st.just(b"[" * 5000)
)
HEADERS = st.lists(
    st.sampled_from(
        [
            "Content-Type: text/plain", "Content-Type: application/json; charset=latin-1",
            "Content-Length: 99999999", "Content-Length: -1", "Content-Length: ١٢",
            "Transfer-Encoding: chunked", "If-Match: \"1\"", "If-Match: *", "If-Match: \"x\"",
            "X-Ctrlrun-Writer: \u202eevil", "X-Ctrlrun-Writer: ", "Origin: http://evil.example",
            "Expect: 100-continue",
        ]
    ),
    max_size=3,
)  # fmt: skip
PATHS = st.sampled_from(
    ["/api/documents", "/api/documents/canary", "/api/documents/canary/history",
     "/api/documents/%2e%2e", "/api/documents/" + "a" * 300, "/api/documents/x?y=\x7f"]
) | st.text(alphabet="/%abc.~é", max_size=12).map(lambda p: "/api/documents/" + p)  # fmt: skip


@budget(60)
@given(st.sampled_from(["GET", "PUT", "POST", "DELETE", "PATCH"]), PATHS, BODIES, HEADERS)
def test_any_request_is_answered_without_a_500_and_refusals_change_nothing(
    served, method, path, body, headers
):
    before = canary_version(served)
    status, answer = exchange(served, request(served, method, path, body, *headers))
    assert status != 500 and b"Traceback" not in answer, (status, answer[:300])
    if not (status == 200 and method == "PUT" and path == "/api/documents/canary"):
        assert canary_version(served) == before


@budget(40)
@given(st.binary(min_size=1, max_size=200))
def test_a_garbage_request_head_is_a_400_or_a_close(served, raw):
    status, answer = exchange(served, raw + b"\r\n\r\n")
    assert status in (None, 400, 403, 404, 405, 408, 413, 415, 505), (status, answer[:200])
