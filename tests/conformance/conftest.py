"""Conformance tests: children compile ctrlrun once per session, not once per process."""

from __future__ import annotations

import pytest

from support.subprocess_env import fast_children


@pytest.fixture(scope="session")
def bytecode_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("pycache")


@pytest.fixture(autouse=True)
def _fast_children(monkeypatch, bytecode_dir):
    fast_children(monkeypatch, bytecode_dir)
