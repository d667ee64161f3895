"""CLI fixtures: a project directory with a policy, and a store filled by real protected calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli import ENV, Scene
from support.policies import POLICY


@pytest.fixture
def empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, with no CTRLRUN_* variable set."""
    monkeypatch.chdir(tmp_path)
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def project(empty: Path) -> Path:
    """The working directory with the shared test policy in it."""
    (empty / "ctrlrun.yaml").write_text(POLICY)
    return empty


@pytest.fixture
def scene(project: Path):
    (project / ".ctrlrun").mkdir()
    built = Scene(project)
    yield built
    built.close()
