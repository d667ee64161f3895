"""``ctrlrun console``: the operator's web console over a store (extra ``ctrlrun[console]``),
and ``ctrlrun console-account`` to add a person to its accounts file.

Loopback only unless ``--allow-remote`` (then a reverse proxy that terminates TLS should stand
in front, naming the person with ``--trusted-header``). Same guards as ``ctrlrun serve``:
Host/Origin checks on loopback, a deadline on every request head, a connection limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ctrlrun.cli.common import (
    Refusal,
    checked_store_url,
    default_store_url,
    listen_address,
    say,
)
from ctrlrun.cli.serve import bind_listening
from ctrlrun.errors import CtrlrunError, MissingDependency
from ctrlrun.kernel.policy import Policy
from ctrlrun.loopback import HostGuard, is_loopback, served_names

DEFAULT_LISTEN = "127.0.0.1:8738"


def _parts() -> tuple[Any, Any, Any]:
    """``create_app``, ``Gate`` and ``serving.serve``, or the install line of the extra."""
    try:
        from ctrlrun import serving
        from ctrlrun.console.app import create_app
        from ctrlrun.console.auth import Gate
    except ModuleNotFoundError as exc:
        missing = MissingDependency(module=(exc.name or "starlette").split(".")[0], extra="console")
        raise Refusal(str(missing)) from None
    return create_app, Gate, serving.serve


@click.command("console")
@click.option(
    "--store-url",
    envvar="CTRLRUN_STORE_URL",
    callback=checked_store_url,
    help="sqlite:///path or postgresql://…?ctrlrun_schema=… (or CTRLRUN_STORE_URL;"
    " default: .ctrlrun/state.db beside the policy, like every other command).",
)
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT")
@click.option(
    "--accounts",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="File of name:argon2-hash lines (see ctrlrun console-account).",
)
@click.option(
    "--trusted-header",
    metavar="NAME",
    help="Take the signed-in person from this header, set by a reverse proxy in front.",
)
@click.option("--allow-remote", is_flag=True, help="Listen on a non-loopback address.")
@click.option(
    "--approver-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Sign every answer (grant or denial) with this Ed25519 private key.",
)
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=10.0, show_default=True)
@click.option("--max-connections", type=click.IntRange(1, 10_000), default=64, show_default=True)
def console(  # noqa: PLR0917 - click passes one argument per option
    store_url: str | None,
    listen: str,
    accounts: Path | None,
    trusted_header: str | None,
    allow_remote: bool,
    approver_key: Path | None,
    timeout: float,
    max_connections: int,
) -> None:
    """Serve the operator's console: approvals, effects, receipts, plans, outbox, documents.

    Give exactly one of --accounts (people sign in with a password) and --trusted-header (a
    reverse proxy names them). Loopback only unless --allow-remote. Without --store-url, the
    store beside the policy; the policy file, when it loads, says how arguments are shown
    (`display:`) and what each rule says.
    """
    if (accounts is None) == (trusted_header is None):
        raise click.UsageError("give exactly one of --accounts and --trusted-header")
    host, port = listen_address(listen, allow_remote=allow_remote, what="console")
    create_app, gate_type, run = _parts()
    from ctrlrun.console.auth import load_accounts
    from ctrlrun.store import open_store

    try:
        gate = gate_type(
            load_accounts(accounts) if accounts else None, trusted_header=trusted_header
        )
        url = default_store_url() if store_url is None else store_url
        policy = _policy()
        state: Any = open_store(url, existing=True)
        sock = bind_listening(host, port)
    except (CtrlrunError, OSError) as exc:
        raise Refusal(str(exc)) from None
    bound_host, bound_port = sock.getsockname()[:2]
    names = served_names(bound_host, bound_port) if is_loopback(host) else None
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    say(f"console on http://{shown}:{bound_port}/", err=True)
    try:
        run(
            HostGuard(
                create_app(
                    state,
                    gate,
                    approver_key.read_bytes() if approver_key else None,
                    dict(policy.approvers) if policy is not None else None,
                    policy,
                ),
                names,
            ),
            sock,
            timeout=timeout,
            max_connections=max_connections,
        )
    finally:
        state.close()


def _policy() -> Policy | None:
    """The policy file (found as ``Control.from_file`` finds it), if it is there: how the
    console shows arguments and rules, and the approvers it must sign for (it then refuses any
    answer it cannot sign as the signed-in person). A file that is there but does not load is
    refused: a console that cannot tell whether answers must be signed does not start."""
    from ctrlrun.config import load_policy_file
    from ctrlrun.runtime.locate import policy_path

    path = policy_path()
    return load_policy_file(path) if path.is_file() else None


@click.command("console-account")
@click.argument("name")
@click.password_option(help="The password (prompted for, twice, when not given).")
def console_account(name: str, password: str) -> None:
    """Print NAME:HASH, a line for the console's accounts file (Argon2id, salted)."""
    if ":" in name or not name.strip() or name != name.strip():
        raise Refusal("an account name has no colon and no surrounding spaces")
    try:
        from ctrlrun.console.auth import hash_password
    except ModuleNotFoundError as exc:
        missing = MissingDependency(module=(exc.name or "argon2").split(".")[0], extra="console")
        raise Refusal(str(missing)) from None
    click.echo(f"{name}:{hash_password(password)}")
