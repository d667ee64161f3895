"""The SQLite store's files: created private, and read where they cannot be written."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path


def create_private(path: Path) -> None:
    """Create the store file readable and writable by its owner only (0600) if it does not
    exist yet: it holds arguments, results and approvals. SQLite gives its -wal and -shm files
    the same permissions. An existing file keeps the mode it has."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def wal_path(path: Path) -> Path:
    """The write-ahead log beside the store file."""
    return path.with_name(path.name + "-wal")


def can_read(conn: sqlite3.Connection) -> bool:
    """Whether a read-only connection can read: a WAL reader opens (or creates) the -shm
    index on its first read, which fails in a directory it cannot write."""
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError:
        return False
    return True
