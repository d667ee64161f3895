"""``ctrlrun demo``: five ways an agent's action goes wrong, each stopped for real.

In process and offline, with a fake provider and a fixed clock. It writes only its own store,
``.ctrlrun/demo/state.db`` under the working directory, and removes only that store's files
before a run; the operator's store (and ``$CTRLRUN_STORE_URL``) is never touched.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Final

import click

from ctrlrun.cli.common import Refusal, say, sqlite_url
from ctrlrun.cli.scenarios import LOST_REPLY_KEY, POLICY_SUMMARY, DemoFailure, run_scenarios
from ctrlrun.display import command_line

DEMO_DIR: Final = Path(".ctrlrun") / "demo"
DEMO_STORE: Final = "state.db"
_STORE_FILES: Final = ("", "-wal", "-shm", "-journal")  # SQLite's file and its companions


def fresh_store(directory: Path) -> Path:
    """The demo store's path, with the files a previous run left removed (and nothing else)."""
    for level in (directory.parent, directory):  # .ctrlrun and .ctrlrun/demo: private
        level.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / DEMO_STORE
    for suffix in _STORE_FILES:
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    return path


@click.command()
def demo() -> None:
    """Five ways an agent's action goes wrong, each refused for real, offline, in well under a
    second: a lost reply, a mutated approval, two agents racing, a replayed approval, and a
    retry after a provable non-execution.

    If the library let any of them through, the demo stops with exit 1 instead of printing a
    pass. Evidence goes to .ctrlrun/demo/state.db, never to your own store.
    """
    path = fresh_store(DEMO_DIR.absolute())
    say("ctrlrun demo: five ways an agent's action goes wrong, each stopped for real")
    say(POLICY_SUMMARY)
    try:
        count = run_scenarios(path, say)
    except DemoFailure as exc:
        raise Refusal(f"the demo failed, so ctrlrun is broken here: {exc}") from exc
    url = sqlite_url(path)
    me = this_command()
    say("")
    say(f"All five held: {count} receipts, hash chain verified.")
    say("Read the evidence (the demo's own store; yours is untouched):")
    say("   " + command_line(me, "receipts", "--store-url", url))
    say("   " + command_line(me, "effects", "--store-url", url))
    say("and settle scenario 1 as the person who checked with the provider:")
    say("   " + command_line(me, "resolve", LOST_REPLY_KEY, "--failed", "--store-url", url))


def this_command() -> str:
    """How to run this ``ctrlrun`` again from the same shell: ``ctrlrun`` when that name
    finds this very script on ``$PATH``, else the script's absolute path (``make demo`` runs
    ``.venv/bin/ctrlrun`` without the venv being activated, so ``ctrlrun`` would not be found
    or would be another install)."""
    script = Path(sys.argv[0])
    if script.name != "ctrlrun" or not script.is_file():
        return "ctrlrun"  # not run as the console script (a test runner, python -c)
    found = shutil.which("ctrlrun")
    if found is not None and Path(found).resolve() == script.resolve():
        return "ctrlrun"
    return str(script.absolute())
