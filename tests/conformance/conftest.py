"""Conformance tests: children compile ctrlrun once per session, not once per process."""

from __future__ import annotations

import pytest

from support.subprocess_env import bytecode_dir, subprocess_children

__all__ = ["bytecode_dir", "subprocess_children"]


@pytest.fixture(autouse=True)
def _children(subprocess_children):
    return subprocess_children
