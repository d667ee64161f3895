"""pytest plugin: real-Postgres fixtures (loaded by ``tests/conftest.py``).

Fixtures:

* ``pg_server`` (session): a ``support.pg.PgServer`` — a throwaway embedded cluster, or the server
  at ``$CTRLRUN_TEST_POSTGRES_URL``. A server that cannot start FAILS every test that asks for it;
  these tests never skip (under ``CI=true`` or not).
* ``pg_schema`` (function): a fresh private schema ``t_<hex>``, dropped at teardown even when the
  test fails; a ``PgSchema`` with ``url``, ``schema``, ``server``.
* ``pg_proxy`` (function): a ``support.pgproxy.PgProxy`` in front of ``pg_server``; closed at
  teardown, which fails the test if a fault could not be injected as armed.
* ``pgbouncer`` (session): a ``support.pgbouncer.PgBouncer`` in transaction mode (installed from
  Debian when absent); fails, never skips, when it cannot start.
* ``pg_standby`` (session, created on first use): a hot ``support.pg.Standby``.

Every test that uses one of these is given the ``postgres`` marker automatically (so
``-m "not postgres"`` deselects them); mark them explicitly too, for the reader.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import psycopg
import pytest

from .pg import PgServer, Standby, start_server, unique_name
from .pgbouncer import PgBouncer, start_pgbouncer
from .pgproxy import PgProxy

POSTGRES_FIXTURES = frozenset({"pg_server", "pg_schema", "pg_proxy", "pgbouncer", "pg_standby"})


def _fail(what: str, exc: BaseException) -> NoReturn:
    mode = "CI=true" if os.environ.get("CI", "").lower() == "true" else "outside CI"
    pytest.fail(
        f"{what} could not be started ({mode}; Postgres tests fail rather than skip): {exc}",
        pytrace=False,
    )


@dataclass(frozen=True)
class PgSchema:
    """A private schema on the session's server. ``url`` is the plain server URL (it does NOT
    set ``search_path``: code under test must name its schema); ``search_path_url`` does."""

    url: str
    schema: str
    server: PgServer

    @property
    def search_path_url(self) -> str:
        return self.server.url_for(options=f"-c search_path={self.schema}")

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """An autocommit superuser connection whose ``search_path`` is this schema."""
        return self.server.connect(self.search_path_url, **kwargs)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    try:
        server = start_server()
    except Exception as exc:
        _fail("the test Postgres server", exc)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_schema(pg_server: PgServer) -> Iterator[PgSchema]:
    name = unique_name("t_")
    pg_server.create_schema(name)
    try:
        yield PgSchema(url=pg_server.url, schema=name, server=pg_server)
    finally:
        pg_server.drop_schema(name)


@pytest.fixture
def pg_proxy(pg_server: PgServer) -> Iterator[PgProxy]:
    proxy = PgProxy(pg_server.url)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture(scope="session")
def pgbouncer(pg_server: PgServer) -> Iterator[PgBouncer]:
    try:
        bouncer = start_pgbouncer(pg_server, "transaction")
    except Exception as exc:
        _fail("pgbouncer", exc)
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture(scope="session")
def pg_standby(pg_server: PgServer) -> Iterator[Standby]:
    try:
        standby = pg_server.start_standby()
    except Exception as exc:
        _fail("the hot standby", exc)
    try:
        yield standby
    finally:
        standby.stop()


def pytest_configure(config: pytest.Config) -> None:
    # declared in pyproject.toml too; repeated here so the plugin stands alone
    config.addinivalue_line("markers", "postgres: needs a real Postgres server")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if POSTGRES_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)
