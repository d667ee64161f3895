"""CLI fixtures: a project directory with a policy, and a store filled by real protected calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrlrun.conformance.store.backends import with_schema
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


@pytest.fixture
def postgres_scene(empty, pg_schema):
    """A project whose store is a Postgres schema, written by real protected calls."""
    from ctrlrun.postgres import PostgresStateStore

    (empty / "ctrlrun.yaml").write_text(POLICY)
    built = Scene(
        empty,
        opener=lambda clock: PostgresStateStore(
            pg_schema.url, schema=pg_schema.schema, clock=clock
        ),
        url=with_schema(pg_schema.url, pg_schema.schema),
    )
    yield built
    built.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_scene(request, project):
    """The project's store on each backend: the SQLite file, then a Postgres schema."""
    if request.param == "postgres":
        yield request.getfixturevalue("postgres_scene")
        return
    (project / ".ctrlrun").mkdir()
    built = Scene(project)
    yield built
    built.close()
