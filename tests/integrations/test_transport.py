"""``ctrlrun.transport.sending()`` against a real local server: only the errors that prove the
request never left (DNS, refused, connect timeout, TLS handshake, pool timeout) become
``NotExecuted``; a reset before or after the server read the request, a read timeout, a
reused keep-alive connection that fails, a redirect or retry after an answered/sent attempt
all stay what they were (AMBIGUOUS). httpx sync and async, requests; then end to end through
``@protect`` on a real store."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import httpx
import pytest
import requests
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

import ctrlrun
from ctrlrun import AmbiguousEffect, Control, NotExecuted
from ctrlrun.config import load_policy_text
from ctrlrun.transport import Unsent, never_sent, sending

Handler = Callable[[socket.socket, "Server"], None]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"


def read_request(conn: socket.socket) -> bool:
    """Read one whole request (head and Content-Length body); False if the peer closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return True


def reset(conn: socket.socket) -> None:
    """Close with an RST instead of a FIN."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


class Server:
    """A loopback TCP server; ``handler(conn, server)`` serves each connection in a thread.
    ``requests`` counts the requests it read whole; ``release`` ends stalls."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/pay"
        self.requests = 0
        self.release = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self.handler(conn, self)
        except OSError:
            pass
        finally:
            conn.close()

    def read(self, conn: socket.socket) -> bool:
        if read_request(conn):
            self.requests += 1
            return True
        return False

    def stop_listening(self) -> None:
        """From now on a connect is refused (shutdown also wakes the blocked accept)."""
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()

    def close(self) -> None:
        self.release.set()
        self.stop_listening()


@contextmanager
def server(handler: Handler) -> Iterator[Server]:
    running = Server(handler)
    try:
        yield running
    finally:
        running.close()


def refused_url() -> str:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/pay"  # nothing listens there any more


def answer(conn, srv):
    while srv.read(conn):
        conn.sendall(OK)  # keep-alive


def reset_before_reading(conn, srv):
    reset(conn)


def reset_after_reading(conn, srv):
    srv.read(conn)
    reset(conn)


def stall(conn, srv):
    srv.read(conn)
    srv.release.wait(30)


def not_tls(conn, srv):
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def answer_once_then_reset(conn, srv):
    srv.read(conn)
    conn.sendall(OK)  # keep-alive: the client pools this connection
    if srv.read(conn):  # the second request arrives on the reused connection
        reset(conn)


def headers_then_stall(conn, srv):
    srv.read(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
    srv.release.wait(30)


def outcome(call: Callable[[], object]) -> BaseException | None:
    """What ``call`` raised through ``sending()``, or None."""
    try:
        with sending():
            call()
    except Exception as exc:  # the test inspects it
        return exc
    return None


def not_executed(exc: BaseException | None, kind: Unsent) -> None:
    assert isinstance(exc, NotExecuted), repr(exc)
    assert exc.unsent is kind
    assert "127.0.0.1" not in str(exc)  # the client's text (URL, query) is not repeated


def ambiguous(exc: BaseException | None) -> None:
    assert exc is not None and not isinstance(exc, NotExecuted), repr(exc)
    assert never_sent(exc) is None


# --- httpx --------------------------------------------------------------------------------


def test_httpx_refused_dns_and_tls_are_never_sent():
    with httpx.Client(timeout=5) as client:
        not_executed(outcome(lambda: client.post(refused_url())), Unsent.CONNECTION_REFUSED)
        bad_name = "http://ctrlrun-test.invalid/pay"
        not_executed(outcome(lambda: client.post(bad_name)), Unsent.DNS_FAILED)
        with server(not_tls) as srv:
            tls = srv.url.replace("http://", "https://")
            not_executed(outcome(lambda: client.post(tls)), Unsent.TLS_HANDSHAKE_FAILED)
            assert srv.requests == 0
        not_executed(outcome(lambda: client.post("ftp://x/")), Unsent.UNSUPPORTED_PROTOCOL)


def test_httpx_connect_timeout_is_never_sent():
    # a listener whose backlog is full: the SYN is not answered, so the connect times out
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        fillers = []
        try:
            for _ in range(8):
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
                fillers.append(filler)
            with httpx.Client(timeout=httpx.Timeout(5, connect=0.5)) as client:
                exc = outcome(lambda: client.post(f"http://127.0.0.1:{port}/pay"))
        finally:
            for filler in fillers:
                filler.close()
    not_executed(exc, Unsent.CONNECT_TIMEOUT)


def test_httpx_pool_timeout_is_never_sent():
    limits = httpx.Limits(max_connections=1)
    with (
        server(headers_then_stall) as srv,
        httpx.Client(limits=limits, timeout=httpx.Timeout(5, pool=0.3)) as client,
        client.stream("GET", srv.url),
    ):  # holds the only connection
        not_executed(outcome(lambda: client.post(srv.url)), Unsent.POOL_TIMEOUT)
        assert srv.requests == 1  # the stream's, not the refused post's


@pytest.mark.parametrize("handler", [reset_after_reading, stall])
def test_httpx_once_the_server_read_it_everything_stays_ambiguous(handler):
    with server(handler) as srv, httpx.Client(timeout=httpx.Timeout(1)) as client:
        ambiguous(outcome(lambda: client.post(srv.url, json={"amount": 5})))
        assert srv.requests == 1


def test_httpx_a_reset_before_reading_is_never_sent_only_while_connecting():
    """The RST can reach the client before its connect() returns (ConnectError: nothing was
    written, never sent) or after (a read or write error: the client cannot tell)."""
    with server(reset_before_reading) as srv, httpx.Client(timeout=1) as client:
        for _ in range(20):
            exc = outcome(lambda: client.post(srv.url, json={"amount": 5}))
            if isinstance(exc, NotExecuted):
                not_executed(exc, Unsent.CONNECT_FAILED)
                assert isinstance(exc.__cause__, httpx.ConnectError)
            else:
                ambiguous(exc)
                assert not isinstance(exc, httpx.ConnectError)
        assert srv.requests == 0


def test_httpx_a_reused_connection_that_fails_stays_ambiguous():
    with server(answer_once_then_reset) as srv, httpx.Client(timeout=5) as client:
        assert client.post(srv.url).status_code == 200
        ambiguous(outcome(lambda: client.post(srv.url)))
        assert srv.requests == 2  # the server did read it


def test_httpx_a_redirect_to_a_refused_host_stays_ambiguous():
    target = refused_url()

    def redirect(conn, srv):
        srv.read(conn)
        head = f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\n"
        conn.sendall(head.encode() + b"\r\n")

    with server(redirect) as srv, httpx.Client(timeout=5, follow_redirects=True) as client:
        exc = outcome(lambda: client.post(srv.url))
    assert isinstance(exc.__cause__ if isinstance(exc, NotExecuted) else exc, httpx.ConnectError)
    ambiguous(exc)  # a ConnectError, but a request was answered before it


def test_httpx_async_the_same():
    async def main():
        async with httpx.AsyncClient(timeout=1) as client:
            refused = await outcome_async(client.post(refused_url()))
            with server(reset_after_reading) as srv:
                after = await outcome_async(client.post(srv.url))
            return refused, after

    async def outcome_async(request):
        try:
            with sending():
                await request
        except Exception as exc:
            return exc
        return None

    refused, after = asyncio.run(main())
    not_executed(refused, Unsent.CONNECTION_REFUSED)
    ambiguous(after)


# --- requests -----------------------------------------------------------------------------


def test_requests_refused_dns_and_tls_are_never_sent():
    with requests.Session() as session:
        post = session.post
        not_executed(outcome(lambda: post(refused_url(), timeout=5)), Unsent.CONNECTION_REFUSED)
        not_executed(
            outcome(lambda: post("http://ctrlrun-test.invalid/pay", timeout=5)),
            Unsent.DNS_FAILED,
        )
        with server(not_tls) as srv:
            tls = srv.url.replace("http://", "https://")
            not_executed(outcome(lambda: post(tls, timeout=5)), Unsent.TLS_HANDSHAKE_FAILED)


@pytest.mark.parametrize("handler", [reset_after_reading, stall])
def test_requests_once_the_server_read_it_everything_stays_ambiguous(handler):
    with server(handler) as srv, requests.Session() as session:
        ambiguous(outcome(lambda: session.post(srv.url, json={"amount": 5}, timeout=1)))
        assert srv.requests == 1


def test_requests_a_reset_before_reading_is_never_sent_only_while_connecting():
    with server(reset_before_reading) as srv, requests.Session() as session:
        for _ in range(20):
            exc = outcome(lambda: session.post(srv.url, json={"amount": 5}, timeout=1))
            if isinstance(exc, NotExecuted):
                not_executed(exc, Unsent.CONNECT_FAILED)
            else:
                ambiguous(exc)
        assert srv.requests == 0


def test_requests_a_reused_connection_that_fails_stays_ambiguous():
    with server(answer_once_then_reset) as srv, requests.Session() as session:
        assert session.post(srv.url, timeout=5).status_code == 200
        ambiguous(outcome(lambda: session.post(srv.url, timeout=5)))


def test_requests_a_redirect_to_a_refused_host_stays_ambiguous():
    target = refused_url()

    def redirect(conn, srv):
        srv.read(conn)
        head = f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\n"
        conn.sendall(head.encode() + b"\r\n")

    with server(redirect) as srv, requests.Session() as session:
        ambiguous(outcome(lambda: session.post(srv.url, timeout=5)))


def retrying_session(**retry) -> requests.Session:
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=Retry(backoff_factor=0, allowed_methods=None, **retry))
    session.mount("http://", adapter)
    return session


def test_requests_connect_retries_that_all_failed_are_never_sent():
    with retrying_session(total=2, connect=2) as session:
        exc = outcome(lambda: session.post(refused_url(), timeout=5))
    not_executed(exc, Unsent.CONNECTION_REFUSED)


def test_requests_a_refused_retry_after_a_sent_attempt_stays_ambiguous():
    # the first attempt is read and reset; urllib3 retries it, and that connect is refused
    def reset_and_stop(conn, srv):
        srv.read(conn)
        srv.stop_listening()
        reset(conn)

    with server(reset_and_stop) as srv, retrying_session(total=2, read=2, connect=2) as session:
        exc = outcome(lambda: session.post(srv.url, timeout=5))
        assert srv.requests == 1
    assert isinstance(exc, requests.ConnectionError)
    ambiguous(exc)


# --- end to end ---------------------------------------------------------------------------

POLICY = """\
schema: ctrlrun.policy/v1
actions:
  shop.refund:
    decision: allow
    effect: "refund:{payment_id}"
"""


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_through_protect_refused_is_failed_and_retried_reset_is_ambiguous(store, clock, kind):
    control = Control(load_policy_text(POLICY), store, clock=clock)
    target = {"url": refused_url()}

    if kind == "sync":

        @ctrlrun.protect("shop.refund", control=control)
        def refund(payment_id: str):
            with sending(), httpx.Client(timeout=1) as client:
                return client.post(target["url"]).status_code

        call = refund
    else:

        @ctrlrun.protect("shop.refund", control=control)
        async def arefund(payment_id: str):
            async with httpx.AsyncClient(timeout=1) as client:
                with sending():
                    return (await client.post(target["url"])).status_code

        def call(payment_id):
            return asyncio.run(arefund(payment_id))

    with ctrlrun.context("bot"):
        with pytest.raises(NotExecuted):
            call("p1")  # FAILED: a retry may run
        with server(answer) as srv:
            target["url"] = srv.url
            assert call("p1") == 200  # attempt 2
        with server(reset_after_reading) as srv:
            target["url"] = srv.url
            with pytest.raises(httpx.HTTPError):
                call("p2")
        with pytest.raises(AmbiguousEffect):
            call("p2")  # the reset left p2 AMBIGUOUS: no blind retry
    results = [(r["effect_key"], r["result"]) for r in store.receipts()]
    assert results == [
        ("refund:p1", "failed"),
        ("refund:p1", "committed"),
        ("refund:p2", "ambiguous"),
        ("refund:p2", "blocked"),
    ]


def test_importing_the_helpers_loads_neither_client():
    import subprocess
    import sys

    probe = (
        "import sys, ctrlrun, ctrlrun.transport;"
        " print(sorted(m for m in ('httpx', 'requests', 'urllib3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
