"""``--listen HOST:PORT`` of ``ctrlrun console`` and ``ctrlrun gateway``: one parser, one line
of refusal for a malformed address, a port out of range or a non-loopback host."""

from __future__ import annotations

import pytest

from support.cli import refused, run


@pytest.fixture
def accounts(tmp_path):
    from ctrlrun.console.auth import hash_password

    path = tmp_path / "accounts"
    path.write_text(f"ada:{hash_password('pw')}\n")
    return path


def console(listen, accounts, *extra):
    store = f"sqlite://{accounts.parent / 'state.db'}"
    return run(
        "console", "--store-url", store, "--accounts", str(accounts), "--listen", listen, *extra
    )


def gateway(listen, *extra):
    upstream = ("--upstream-stdio", "true", "--alias", "x", "--principal", "bot")
    return run("gateway", *upstream, "--listen", listen, *extra)


FULL_WIDTH = "127.0.0.1:\uff18\uff10"  # digits, but not ASCII ones


@pytest.mark.parametrize("listen", ["127.0.0.1", ":8738", "127.0.0.1:70000", FULL_WIDTH])
def test_a_malformed_address_is_one_line_on_both(listen, accounts):
    for result in (console(listen, accounts), gateway(listen)):
        refused(result, "HOST:PORT")


def test_a_remote_address_needs_allow_remote_on_both(accounts):
    refused(console("0.0.0.0:0", accounts), "--allow-remote to expose the console")
    refused(gateway("[::]:0"), "--allow-remote to expose the gateway")
