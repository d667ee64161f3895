"""Verify's Postgres machinery on a real server, each part on its own: the CREATE probe refuses
naming the reason and leaves no schema behind, and the two G11 windows really open — the
injector is tested before anything relies on it. (The full run on the real store is
``test_verify_postgres.py``.)"""

from __future__ import annotations

from types import SimpleNamespace

import psycopg
import pytest
from click.testing import CliRunner

from ctrlrun.cli import main
from ctrlrun.verify.commit import _KillAtCommit, _KillNow
from ctrlrun.verify.scratch import ConfigRefused, PostgresScratch, probe_create
from support.pg import unique_name
from support.policies import POLICY

pytestmark = pytest.mark.postgres


def leftover_schemas(server) -> list[str]:
    with server.connect() as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'ctrlrun_verify_%'"
        ).fetchall()
    return [row[0] for row in rows]


@pytest.fixture
def role_without_create(pg_server):
    name = unique_name("verify_nocreate_")
    url = pg_server.create_role(name)
    yield name, url
    pg_server.drop_role(name)


def test_a_role_without_create_is_refused_naming_role_and_database(pg_server, role_without_create):
    name, url = role_without_create
    with pytest.raises(ConfigRefused) as refused:
        probe_create(url)
    assert f"role {name} has no CREATE privilege on database" in str(refused.value)
    assert "GRANT CREATE ON DATABASE" in str(refused.value)


def test_the_cli_exits_2_and_leaves_no_schema(pg_server, role_without_create, tmp_path):
    _, url = role_without_create
    (tmp_path / "ctrlrun.yaml").write_text(POLICY)
    result = CliRunner().invoke(
        main, ["verify", "--policy", str(tmp_path / "ctrlrun.yaml"), "--store-url", url]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: role ") and "CREATE" in result.stderr
    assert leftover_schemas(pg_server) == []


def test_with_create_the_probe_passes_and_drops_its_schema(pg_server):
    probe_create(pg_server.url)
    assert leftover_schemas(pg_server) == []


@pytest.fixture
def scratch(pg_schema):
    """A PostgresScratch on a private schema with a stand-in ``receipts`` table."""
    with pg_schema.connect() as conn:
        conn.execute("CREATE TABLE receipts (seq bigint PRIMARY KEY)")
    return PostgresScratch(pg_schema.url, pg_schema.schema)


def store_like_connection(scratch):
    """A connection that looks like the store's to G11 (same application_name)."""
    return psycopg.connect(scratch.connection_url(), autocommit=False)


def rows(scratch) -> int:
    with scratch.admin() as conn:
        return conn.execute(f'SELECT count(*) FROM "{scratch.schema}".receipts').fetchone()[0]


def test_the_commit_window_blocks_inside_commit_and_the_kill_lands(scratch):
    window = _KillAtCommit(SimpleNamespace(scratch=scratch))
    conn = store_like_connection(scratch)
    try:
        conn.execute(f'INSERT INTO "{scratch.schema}".receipts VALUES (1)')
        window.fire()
        with pytest.raises(psycopg.OperationalError):
            conn.commit()  # blocks on the advisory lock inside COMMIT until killed
    finally:
        window.close()
        conn.close()
    assert window.hit
    assert rows(scratch) == 0  # the transaction did not land
    # control: with the window closed (trigger dropped) the same write commits
    with store_like_connection(scratch) as again:
        again.execute(f'INSERT INTO "{scratch.schema}".receipts VALUES (2)')
    assert rows(scratch) == 1


def test_the_commit_window_finds_a_commit_sent_with_the_statements_before_it(scratch):
    """The store sends its last statements in one message with the COMMIT; a long one is
    truncated in pg_stat_activity, so the window must not read the query text."""
    window = _KillAtCommit(SimpleNamespace(scratch=scratch))
    conn = store_like_connection(scratch)
    conn.autocommit = True
    filler = "x" * 4000
    try:
        conn.execute("BEGIN")
        window.fire()
        with pytest.raises(psycopg.OperationalError):
            conn.execute(
                f"SELECT '{filler}'; INSERT INTO \"{scratch.schema}\".receipts VALUES (3); COMMIT"
            )
    finally:
        window.close()
        conn.close()
    assert window.hit and rows(scratch) == 0


def test_the_commit_window_reports_a_miss(scratch, monkeypatch):
    import ctrlrun.verify.commit as commit

    monkeypatch.setattr(commit, "WAIT", 0.2)
    window = _KillAtCommit(SimpleNamespace(scratch=scratch))
    try:
        window.fire()  # nobody ever commits: the watcher gives up, bounded
        window.watcher.join(5)
        assert not window.watcher.is_alive()
    finally:
        window.close()
    assert not window.hit and "ever waited inside COMMIT" in window.note


def test_the_idle_window_kills_the_stores_connections(scratch):
    conn = store_like_connection(scratch)
    window = _KillNow(SimpleNamespace(scratch=scratch))
    try:
        conn.execute("SELECT 1")
        conn.commit()
        window.fire()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    finally:
        window.close()
        conn.close()
    assert window.hit
