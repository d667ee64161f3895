"""The small output helpers every command shares, and color only on a real terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ctrlrun.cli.common import shorten, who
from ctrlrun.store.url import redacted
from support.terminal import on_a_terminal


def test_a_password_is_never_printed():
    assert redacted("postgresql://app:s3cret@db:5432/x?sslmode=require") == (
        "postgresql://app:***@db:5432/x?sslmode=require"
    )
    assert redacted("sqlite:///tmp/state.db") == "sqlite:///tmp/state.db"


def test_principals_and_long_text():
    assert who({"agent": "bot", "user": "alice"}) == "bot/alice"
    assert who({"agent": "bot", "user": None}) == "bot"
    assert who(None) == who({}) == "-"
    assert shorten("a\nb   c") == "a\\nb   c" and shorten(None) == "-"  # visible, not folded
    assert shorten("x" * 100, 10) == "x" * 9 + "…"


def _effects_through(scene, stdout_to_tty: bool) -> bytes:
    """``ctrlrun effects`` as a real process, its stdout a pseudo-terminal or a pipe."""
    ctrlrun_bin = Path(sys.executable).with_name("ctrlrun")
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")} | {"TERM": "xterm"}
    if not stdout_to_tty:
        done = subprocess.run(
            [ctrlrun_bin, "effects"],
            cwd=scene.root,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout
    code, written = on_a_terminal([str(ctrlrun_bin), "effects"], cwd=scene.root, env=env)
    assert code == 0, written
    return written


def test_color_only_on_a_terminal(scene):
    scene.committed("pay_1")
    scene.ambiguous("pay_2")
    on_a_terminal = _effects_through(scene, stdout_to_tty=True)
    piped = _effects_through(scene, stdout_to_tty=False)
    assert b"\x1b[" in on_a_terminal and b"ambiguous" in on_a_terminal
    assert b"\x1b[" not in piped and b"ambiguous" in piped
