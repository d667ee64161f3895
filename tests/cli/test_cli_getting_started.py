"""Getting started without detours (issue 27): a missing policy names the directory searched
and ``CTRLRUN_CONFIG``; the commands ``make demo`` prints work without the venv activated;
a cancelled call's note says what happened, not the event loop's internals."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import ctrlrun
from ctrlrun.config import load_policy_text
from support.cli import refused, run

SCRIPT = Path(sys.executable).with_name("ctrlrun")


def test_a_missing_policy_names_the_directory_searched_and_ctrlrun_config(empty):
    line = refused(run("effects"))
    assert f"looked for ctrlrun.yaml in {empty}" in line
    assert "set CTRLRUN_CONFIG to its path" in line and "ctrlrun init" in line
    with pytest.raises(ctrlrun.PolicyError) as caught:
        ctrlrun.Control.from_file()
    assert f"looked for ctrlrun.yaml in {empty}" in caught.value.message
    assert "CTRLRUN_CONFIG" in caught.value.message


def test_a_missing_policy_named_by_ctrlrun_config_says_so(empty, monkeypatch):
    monkeypatch.setenv("CTRLRUN_CONFIG", str(empty / "agents.yaml"))
    line = refused(run("approvals"))
    assert f"no policy file at {empty / 'agents.yaml'} (the path CTRLRUN_CONFIG names)" in line
    with pytest.raises(ctrlrun.PolicyError, match="the path CTRLRUN_CONFIG names"):
        ctrlrun.Control.from_file()


def test_the_demo_s_printed_commands_run_without_the_venv_on_path(empty):
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(empty), "LANG": "C.UTF-8"}
    assert SCRIPT.is_file(), SCRIPT
    done = subprocess.run(
        [str(SCRIPT), "demo"], cwd=empty, env=bare, capture_output=True, text=True, check=True
    )
    commands = [line.strip() for line in done.stdout.splitlines() if "--store-url" in line]
    assert len(commands) == 3
    for command in commands:
        assert shlex.split(command)[0] == str(SCRIPT)  # not `ctrlrun`: it is not on PATH
        ran = subprocess.run(
            command, shell=True, cwd=empty, env=bare, capture_output=True, text=True, check=False
        )
        assert ran.returncode == 0, (command, ran.stderr)
    assert "resolved failed by cli:local" in ran.stdout


def test_the_demo_prints_plain_ctrlrun_when_that_is_this_script(empty):
    env = {"PATH": f"{SCRIPT.parent}:/usr/bin:/bin", "HOME": str(empty), "LANG": "C.UTF-8"}
    done = subprocess.run(
        [str(SCRIPT), "demo"], cwd=empty, env=env, capture_output=True, text=True, check=True
    )
    assert re.search(r"^   ctrlrun receipts --store-url ", done.stdout, re.MULTILINE)


MAIL = """\
schema: ctrlrun.policy/v1
actions:
  mail.send:
    decision: allow
    effect: "mail:{to}"
"""


def test_a_cancelled_call_s_note_carries_no_event_loop_internals(tmp_path):
    store = ctrlrun.SQLiteStateStore(tmp_path / "state.db")
    control = ctrlrun.Control(load_policy_text(MAIL), store)

    inside: list[asyncio.Event] = []

    @ctrlrun.protect("mail.send", control=control)
    async def send(to: str) -> None:
        inside[0].set()
        await asyncio.Event().wait()  # until cancelled

    async def main() -> None:
        inside.append(asyncio.Event())
        with ctrlrun.context("bot", None):
            task = asyncio.ensure_future(send("a@example.com"))
        await inside[0].wait()  # the executor is running: its outcome becomes unknown
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    [receipt] = store.receipts()
    assert receipt["result"] == "ambiguous"
    assert receipt["error"] == (
        "CancelledError: the caller was cancelled (a timeout, a shutdown or a task cancel)"
    )
    effect = store.get_effect("mail:a@example.com")
    assert "cancel scope" not in (effect.error or "") and "0x" not in (effect.error or "")
    store.close()
