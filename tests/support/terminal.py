"""What a person sees: a command run with a real pseudo-terminal as its stdout and stderr, its
bytes fed to a terminal emulator (pyte) whose screen already shows a line of its own."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pyte

CTRLRUN = str(Path(sys.executable).with_name("ctrlrun"))  # the installed console script
BEFORE = "BEFORE: what the screen showed before the command ran"
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # the colors ctrlrun itself writes on a terminal


@dataclass
class Seen:
    """The command's exit code, the bytes it wrote, and the emulator that read them."""

    code: int
    raw: bytes
    screen: pyte.Screen

    @property
    def lines(self) -> list[str]:
        """The screen's rows, trailing blanks dropped, up to the last row with text."""
        rows = [row.rstrip() for row in self.screen.display]
        while rows and not rows[-1]:
            rows.pop()
        return rows

    def unsafe_written(self) -> list[str]:
        """Characters other than line ends and ctrlrun's own colors that could steer the
        terminal (controls, format and separator characters), as written."""
        text = _SGR.sub("", self.raw.decode("utf-8"))
        return [
            repr(c)
            for c in text
            if c not in "\r\n" and unicodedata.category(c) in {"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"}
        ]


def on_a_terminal(argv: list[str], *, cwd: Path, env: dict[str, str]) -> tuple[int, bytes]:
    """Run ``argv`` with a pseudo-terminal as its stdout and stderr: its exit code and every
    byte it wrote there."""
    leader, follower = pty.openpty()
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower
    ) as child:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = child.wait(timeout=60)
    os.close(leader)
    return code, b"".join(chunks)


def seen(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Seen:
    """Run ``ctrlrun args`` on a pseudo-terminal (stdout and stderr both) and show what it
    wrote on a 2000 x 80 screen (wide enough that no row wraps) that already holds ``BEFORE``
    on its first row."""
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    base["TERM"] = "xterm"
    code, raw = on_a_terminal([CTRLRUN, *args], cwd=cwd, env=base | (env or {}))
    screen = pyte.Screen(2000, 80)
    stream = pyte.ByteStream(screen)
    stream.feed(BEFORE.encode() + b"\r\n")
    stream.feed(raw)
    return Seen(code, raw, screen)
