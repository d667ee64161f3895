"""Console sign-in is throttled per account and per client address, with backoff, logged; and
``?done=`` shows only the console's own messages (issue 26). A real console app served by
uvicorn on loopback, real HTTP clients bound to distinct loopback addresses (127.0.0.x), and
an injected clock: time passes by moving it, never by sleeping."""

from __future__ import annotations

import logging

import httpx
import pytest

from ctrlrun import SQLiteStateStore
from ctrlrun.console.app import create_app
from ctrlrun.console.auth import Gate, hash_password
from ctrlrun.console.throttle import BASE_DELAY, FREE_FAILURES
from ctrlrun.testing import ManualClock
from support.http_server import ServerThread

PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def hashed():
    return hash_password(PASSWORD)  # Argon2 is slow on purpose: once per module


@pytest.fixture
def console(tmp_path, hashed):
    clock = ManualClock()
    store = SQLiteStateStore(tmp_path / "state.db")
    gate = Gate({"ada": hashed, "zoë": hashed}, secure_cookie=False, clock=clock)
    server = ServerThread(create_app(store, gate)).start()
    yield server.url, clock
    server.stop()
    store.close()


def client(url, address="127.0.0.1"):
    """A client whose connections come from ``address`` (any of 127.0.0.0/8 is loopback)."""
    return httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=address))


def attempt(http, name, password):
    return http.post("/sign-in", data={"name": name, "password": password})


def test_failures_on_one_account_back_off_and_a_success_clears_them(console, caplog):
    url, clock = console
    caplog.set_level(logging.WARNING, logger="ctrlrun.console")
    with client(url) as http:
        for _ in range(FREE_FAILURES):
            assert attempt(http, "ada", "wrong").status_code == 401
        refused = attempt(http, "ada", PASSWORD)  # the right password, too early
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) == BASE_DELAY.total_seconds()
        assert "Too many failed sign-ins" in refused.text
        clock.advance(BASE_DELAY)
        assert attempt(http, "ada", "wrong").status_code == 401  # the next failure doubles
        assert attempt(http, "ada", PASSWORD).status_code == 429
        clock.advance(BASE_DELAY)
        assert attempt(http, "ada", PASSWORD).status_code == 429
        clock.advance(BASE_DELAY)
        signed_in = attempt(http, "ada", PASSWORD)
        assert signed_in.status_code == 303 and "ctrlrun_console" in signed_in.cookies
        assert attempt(http, "ada", "wrong").status_code == 401  # counting starts again
    logged = [r.getMessage() for r in caplog.records if r.name == "ctrlrun.console"]
    assert any("failed sign-in 3 for account:ada" in line for line in logged)
    assert any("sign-in refused for account:ada" in line for line in logged)


def test_an_account_guessed_from_many_addresses_is_slowed_everywhere(console):
    url, _clock = console
    for n in range(FREE_FAILURES):
        with client(url, f"127.0.0.{10 + n}") as http:
            assert attempt(http, "zoë", "guess").status_code == 401
    with client(url, "127.0.0.99") as fresh:
        assert attempt(fresh, "zoë", PASSWORD).status_code == 429
        assert attempt(fresh, "ada", PASSWORD).status_code == 303  # other accounts are not


def test_one_address_spraying_names_is_slowed_for_every_name(console):
    url, _clock = console
    with client(url, "127.0.0.20") as sprayer:
        for n in range(FREE_FAILURES):
            assert attempt(sprayer, f"user{n}", "guess").status_code == 401
        assert attempt(sprayer, "ada", PASSWORD).status_code == 429
    with client(url, "127.0.0.21") as other:
        assert attempt(other, "ada", PASSWORD).status_code == 303


def test_done_shows_only_the_console_s_own_messages(console):
    url, _clock = console
    record = "apr_" + "0" * 31 + "1"
    with client(url) as http:
        assert attempt(http, "ada", PASSWORD).status_code == 303
        own = http.get("/", params={"done": f"granted {record}"})
        assert f"granted {record}" in own.text
        for forged in (
            "Your account is suspended: call +1 555 0100",
            "granted call +1 555 0100 now",
            f"paid {record}",
            f"granted {record} and call +1 555 0100",
        ):
            page = http.get("/", params={"done": forged})
            assert page.status_code == 200 and 'class="done"' not in page.text
            assert "555 0100" not in page.text
        durable = http.get("/durable", params={"done": "settled all invoices"})
        assert 'class="done"' not in durable.text
