"""``ctrlrun approver keygen``: a key pair for an approver whose grants must be signed."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ctrlrun.cli.common import Refusal, say
from ctrlrun.kernel.approval import check_person


@click.group("approver")
def approver_group() -> None:
    """Keys for approvers whose grants the policy requires to be signed."""


@approver_group.command("keygen")
@click.argument("name")
@click.option("--out", metavar="FILE", help="Where to write the private key (default NAME.pem).")
def keygen(name: str, out: str | None) -> None:
    """Make an Ed25519 key pair for approver NAME: the private key goes to FILE (created
    0600, never overwritten); the line to add under `approvers:` in the policy is printed."""
    from ctrlrun.kernel.signing import generate

    check_person(name)
    path = Path(out or f"{name}.pem")
    pem, public = generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise Refusal(f"{path} already exists: a key file is never overwritten") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    say(f"wrote {name}'s private key to {path} (0600): keep it where only {name} can read it")
    say("add to the policy:")
    say("approvers:")
    say(f'  {name}: {{key: "{public}"}}')
