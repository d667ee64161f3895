"""Environment for tests whose code under test starts Python subprocesses.

* Bytecode: this machine sets ``PYTHONDONTWRITEBYTECODE=1``, so every child would compile
  ctrlrun from source (seconds per eight-process race). Children get a private
  ``PYTHONPYCACHEPREFIX`` instead; semantics are unchanged.
* Injection: ``inject(monkeypatch, broken_store=…, mutation=…)`` puts
  ``support/inject/sitecustomize.py`` on ``PYTHONPATH`` so a broken store or a kernel mutation
  reaches every child as well as this process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
INJECT = TESTS / "support" / "inject"


def fast_children(monkeypatch, cache_dir: Path) -> None:
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(cache_dir))


def inject(monkeypatch, *, broken_store: str | None = None, mutation: str | None = None) -> None:
    existing = os.environ.get("PYTHONPATH")
    path = str(INJECT) if not existing else f"{INJECT}{os.pathsep}{existing}"
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("CTRLRUN_TEST_SUPPORT", str(TESTS))
    if broken_store:
        monkeypatch.setenv("CTRLRUN_TEST_BROKEN_STORE", broken_store)
    if mutation:
        monkeypatch.setenv("CTRLRUN_TEST_MUTATION", mutation)


@pytest.fixture(scope="session")
def bytecode_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("pycache")


@pytest.fixture
def subprocess_children(monkeypatch, bytecode_dir):
    """Children of this test compile ctrlrun once per session (see ``fast_children``)."""
    fast_children(monkeypatch, bytecode_dir)
