"""The side journal: what the fake remote saw, written outside the store under test.

One append-only file per worker. Every line is fsynced before the remote "acts", so a line
marked ``acting`` means the point of no return was passed, whatever the store says.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class Journal:
    """Append-only, fsynced JSON lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, **entry: Any) -> None:
        os.write(self._fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def read_journals(directory: Path) -> Iterator[dict[str, Any]]:
    """Every complete line of every journal in ``directory`` (a torn last line is skipped:
    a process killed mid-write never passed the point of no return for that line)."""
    for path in sorted(directory.glob("journal-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                yield json.loads(line)
            except ValueError:
                continue
