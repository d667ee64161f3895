"""Self-tests of the real-Postgres support: the server, schemas, roles, a SQL_ASCII database,
the hot standby, pgbouncer, and the fixtures' promises (never skip; drop even on failure)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import errors, sql

from support.pg import PgServer, Standby, make_url, replace_url, unique_name
from support.pg_fixtures import PgSchema
from support.pgbouncer import PgBouncer

pytestmark = pytest.mark.postgres

TESTS_DIR = Path(__file__).resolve().parent


def test_url_helpers_round_trip() -> None:
    sock = make_url(host="/tmp/a b", port=5433, user="postgres", dbname="db")
    assert psycopg.conninfo.conninfo_to_dict(sock) == {
        "user": "postgres",
        "dbname": "db",
        "host": "/tmp/a b",
        "port": "5433",
    }
    tcp = replace_url(sock, host="127.0.0.1", user="r:1", password="p@ss", sslmode="disable")
    assert psycopg.conninfo.conninfo_to_dict(tcp) == {
        "user": "r:1",
        "password": "p@ss",
        "dbname": "db",
        "host": "127.0.0.1",
        "port": "5433",
        "sslmode": "disable",
    }


def test_server_is_real_and_described(pg_server: PgServer) -> None:
    with psycopg.connect(pg_server.url, connect_timeout=10) as conn:
        version, is_super = conn.execute(
            "SELECT current_setting('server_version_num')::int, "
            "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        ).fetchone() or (0, False)
    assert version >= 150000
    assert is_super
    for tool in ("pg_ctl", "pg_basebackup", "psql", "initdb"):
        assert (pg_server.bin_dir / tool).is_file(), tool
    if pg_server.embedded:
        assert pg_server.socket_dir is not None
        assert (pg_server.socket_dir / f".s.PGSQL.{pg_server.port}").is_socket()


def test_pg_schema_is_private_and_empty(pg_schema: PgSchema) -> None:
    assert pg_schema.schema.startswith("t_")
    with pg_schema.connect() as conn:
        assert conn.execute("SHOW search_path").fetchone() == (pg_schema.schema,)
        conn.execute("CREATE TABLE t (x int)")
        count = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", [pg_schema.schema]
        ).fetchone()
    assert count == (1,)
    assert "search_path" not in pg_schema.url  # code under test must name its schema


def test_drop_schema_removes_it_and_its_contents(pg_server: PgServer) -> None:
    name = unique_name("t_")
    pg_server.create_schema(name)
    with pg_server.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.t (x int)").format(sql.Identifier(name)))
    pg_server.drop_schema(name)
    with pg_server.connect() as conn:
        gone = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [name]).fetchone()
    assert gone is None


def test_drop_schema_ends_a_transaction_left_open_in_it(pg_server: PgServer) -> None:
    name = unique_name("t_")
    pg_server.create_schema(name)
    with pg_server.connect() as holder:
        holder.execute("BEGIN")
        holder.execute(sql.SQL("CREATE TABLE {}.t (x int)").format(sql.Identifier(name)))
        pg_server.drop_schema(name, lock_timeout_ms=2000)  # would time out without termination
        with pytest.raises(psycopg.OperationalError):
            holder.execute("SELECT 1")
    with pg_server.connect() as conn:
        gone = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [name]).fetchone()
    assert gone is None


def test_sql_ascii_database(pg_server: PgServer) -> None:
    name = unique_name("ascii_")
    url = pg_server.create_database(name, encoding="SQL_ASCII")
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            (encoding,) = conn.execute("SHOW server_encoding").fetchone() or ("",)
            (db,) = conn.execute("SELECT current_database()").fetchone() or ("",)
        decode = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731
        assert decode(encoding) == "SQL_ASCII"  # psycopg returns bytes under SQL_ASCII
        assert decode(db) == name
    finally:
        pg_server.drop_database(name)


def test_role_with_usage_but_without_create(pg_server: PgServer, pg_schema: PgSchema) -> None:
    name = unique_name("r_")
    url = pg_server.create_role(name, usage_on=[pg_schema.schema])
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT current_user, has_schema_privilege(%s, %s, 'USAGE'), "
                "has_schema_privilege(%s, %s, 'CREATE')",
                [name, pg_schema.schema, name, pg_schema.schema],
            ).fetchone()
            assert row == (name, True, False)
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(
                    sql.SQL("CREATE TABLE {}.t (x int)").format(sql.Identifier(pg_schema.schema))
                )
        # positive control: the same role granted CREATE can create there
        with pg_server.connect() as conn:
            grant = sql.SQL("GRANT CREATE ON SCHEMA {} TO {}")
            conn.execute(grant.format(sql.Identifier(pg_schema.schema), sql.Identifier(name)))
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(
                sql.SQL("CREATE TABLE {}.t (x int)").format(sql.Identifier(pg_schema.schema))
            )
    finally:
        pg_server.drop_role(name)


def _wait_for_replay(standby: psycopg.Connection[tuple[object, ...]], lsn: str) -> None:
    """Bounded poll until the standby has replayed up to ``lsn`` (replication is asynchronous)."""
    deadline = time.monotonic() + 10
    query = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
    while standby.execute(query, [lsn]).fetchone() != (True,):
        assert time.monotonic() < deadline, "the standby did not catch up in 10 s"
        time.sleep(0.02)  # a bounded poll for replay, not a race


@pytest.mark.slow
def test_standby_is_in_recovery_and_streams(pg_server: PgServer, pg_standby: Standby) -> None:
    with pg_server.connect() as primary, pg_server.connect(pg_standby.url) as standby:
        assert primary.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
        assert standby.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        table = unique_name("standby_probe_")
        primary.execute(sql.SQL("CREATE TABLE public.{} (x int)").format(sql.Identifier(table)))
        try:
            primary.execute(
                sql.SQL("INSERT INTO public.{} VALUES (42)").format(sql.Identifier(table))
            )
            (lsn,) = primary.execute("SELECT pg_current_wal_lsn()").fetchone() or ("",)
            _wait_for_replay(standby, str(lsn))
            select = sql.SQL("SELECT x FROM public.{}").format(sql.Identifier(table))
            assert standby.execute(select).fetchone() == (42,)
            with pytest.raises(errors.ReadOnlySqlTransaction):
                standby.execute(
                    sql.SQL("INSERT INTO public.{} VALUES (1)").format(sql.Identifier(table))
                )
        finally:
            primary.execute(sql.SQL("DROP TABLE public.{}").format(sql.Identifier(table)))


def _bouncer(url: str) -> psycopg.Connection[tuple[object, ...]]:
    # pgbouncer 1.18 in transaction mode cannot carry protocol-level prepared statements
    return psycopg.connect(url, autocommit=True, connect_timeout=10, prepare_threshold=None)


def _server_links(bouncer: PgBouncer) -> int:
    """Server connections pgbouncer has linked to a client right now (database postgres)."""
    with _bouncer(bouncer.admin_url) as admin:
        cur = admin.execute("SHOW POOLS")
        cols = [c.name for c in cur.description or []]
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    return sum(int(r["sv_active"]) for r in rows if r["database"] == "postgres")


def test_pgbouncer_runs_transactions_in_transaction_mode(
    pgbouncer: PgBouncer, pg_schema: PgSchema
) -> None:
    assert pgbouncer.pool_mode == "transaction"
    assert "pool_mode = transaction" in pgbouncer.ini_path.read_text()
    with _bouncer(pgbouncer.admin_url) as admin:
        config = {str(r[0]): str(r[1]) for r in admin.execute("SHOW CONFIG").fetchall()}
    assert config["pool_mode"] == "transaction"

    table = sql.SQL("{}.t").format(sql.Identifier(pg_schema.schema))
    with pg_schema.server.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (k text PRIMARY KEY)").format(table))
    insert = sql.SQL("INSERT INTO {} VALUES (%s)").format(table)
    with _bouncer(pgbouncer.url) as one, _bouncer(pgbouncer.url) as two:
        # two clients with overlapping transactions, each on its own server connection
        one.execute("BEGIN")
        two.execute("BEGIN")
        one.execute(insert, ["one"])
        two.execute(insert, ["two"])
        assert _server_links(pgbouncer) == 2
        one.execute("COMMIT")
        two.execute("COMMIT")
        # transaction mode, behaviourally: an idle client keeps no server connection
        assert _server_links(pgbouncer) == 0
        one.execute("SELECT 1")
        assert _server_links(pgbouncer) == 0
    with pg_schema.server.connect() as conn:
        rows = conn.execute(sql.SQL("SELECT k FROM {} ORDER BY k").format(table)).fetchall()
    assert rows == [("one",), ("two",)]


# --------------------------------------------------------------------------- fixture promises


@pytest.fixture
def inner_pytest(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytest run in a subprocess that loads these fixtures (tests/ on its path)."""
    path = os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    pytester.makeconftest('pytest_plugins = ["support.pg_fixtures"]\n')
    return pytester


@pytest.mark.slow
def test_a_failing_test_still_drops_its_schema(
    inner_pytest: pytest.Pytester, pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTRLRUN_TEST_POSTGRES_URL", pg_server.url)  # reuse this session's server
    inner_pytest.makepyfile(
        """
        def test_fails(pg_schema):
            with pg_schema.connect() as conn:
                conn.execute("CREATE TABLE t (x int)")
            print("SCHEMA=" + pg_schema.schema)
            assert False
        """
    )
    result = inner_pytest.runpytest_subprocess("-p", "no:cacheprovider", timeout=60)
    result.assert_outcomes(failed=1)
    (line,) = [x for x in result.outlines if x.startswith("SCHEMA=")]
    schema = line.removeprefix("SCHEMA=")
    with pg_server.connect() as conn:
        left = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
    assert left is None


@pytest.mark.parametrize("ci", ["true", ""])
def test_an_unreachable_server_fails_and_never_skips(
    inner_pytest: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str
) -> None:
    monkeypatch.setenv("CI", ci)
    dead = make_url(host=str(tmp_path / "nowhere"), port=5432, user="postgres", dbname="x")
    monkeypatch.setenv("CTRLRUN_TEST_POSTGRES_URL", dead)
    inner_pytest.makepyfile(
        """
        def test_one(pg_server):
            pass

        def test_two(pg_schema):
            pass
        """
    )
    result = inner_pytest.runpytest_subprocess("-p", "no:cacheprovider", timeout=60)
    result.assert_outcomes(errors=2)
    assert "fail rather than skip" in result.stdout.str()
