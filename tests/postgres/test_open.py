"""Opening a Postgres store: each refusal, the migrations, concurrent first starts, the URL."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from psycopg import sql

from ctrlrun.errors import InvalidArgument, MissingDependency, SchemaMismatch, StoreError
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store import open_store
from ctrlrun.store.queries import migration_files
from support.pg import unique_name

from .conftest import wait_for_lock_waiter

pytestmark = pytest.mark.postgres

KNOWN = tuple(m for m, _ in migration_files("postgres"))
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"


def applied(pg_schema) -> list[str]:
    with pg_schema.connect() as conn:
        return [r[0] for r in conn.execute("SELECT migration_id FROM schema_version ORDER BY 1")]


def tables(server, schema) -> list[str]:
    with server.connect() as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", [schema]
        )
        return [r[0] for r in rows]


class TestRefusals:
    @pytest.mark.parametrize(
        "name",
        ['bad"quote', "x; DROP SCHEMA public", "", "a" * 64, "1abc", "sp ace", "ünï", "a-b", None],
    )
    def test_a_schema_name_that_is_not_a_plain_identifier_is_refused_before_connecting(self, name):
        with pytest.raises(InvalidArgument):
            PostgresStateStore(UNREACHABLE, schema=name)

    def test_the_longest_plain_name_is_accepted(self, pg_server):
        name = "s" * 63
        PostgresStateStore.create_schema(pg_server.url, name)
        try:
            PostgresStateStore(pg_server.url, schema=name).close()
        finally:
            pg_server.drop_schema(name)

    def test_a_missing_schema_is_refused_by_name_and_not_created(self, pg_server):
        name = unique_name("missing_")
        with pytest.raises(SchemaMismatch, match=name):
            PostgresStateStore(pg_server.url, schema=name)
        with pg_server.connect() as conn:
            found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [name])
            assert found.fetchone() is None

    @pytest.mark.parametrize("usage", [True, False])
    def test_a_role_without_create_is_refused_with_the_exact_grant(
        self, pg_server, pg_schema, usage
    ):
        role = unique_name("r_")
        url = pg_server.create_role(role, usage_on=[pg_schema.schema] if usage else [])
        try:
            with pytest.raises(StoreError) as caught:
                PostgresStateStore(url, schema=pg_schema.schema)
            grant = f'GRANT USAGE, CREATE ON SCHEMA "{pg_schema.schema}" TO "{role}"'
            assert grant in str(caught.value)
            assert tables(pg_server, pg_schema.schema) == []
        finally:
            pg_server.drop_role(role)

    def test_a_sql_ascii_database_is_refused_by_name(self, pg_server):
        name = unique_name("ascii_")
        url = pg_server.create_database(name, encoding="SQL_ASCII")
        try:
            with pytest.raises(StoreError, match="SQL_ASCII"):
                PostgresStateStore(url)
        finally:
            pg_server.drop_database(name)

    def test_a_hot_standby_is_refused(self, pg_standby):
        with pytest.raises(StoreError, match="hot standby"):
            PostgresStateStore(pg_standby.url)
        with pytest.raises(StoreError, match="hot standby"):
            PostgresStateStore.open_existing(pg_standby.url)

    def test_a_newer_schema_is_refused_naming_both_before_reading_anything(self, pg_schema):
        with pg_schema.connect() as conn:  # nothing but the history: no other table exists
            conn.execute(
                "CREATE TABLE schema_version (migration_id text PRIMARY KEY,"
                " applied_at timestamptz NOT NULL, ctrlrun_version text NOT NULL)"
            )
            for migration_id in (*KNOWN, "9999_from_the_future"):
                conn.execute(
                    "INSERT INTO schema_version VALUES (%s, now(), '9.9.9')", [migration_id]
                )
        for opener in (PostgresStateStore, PostgresStateStore.open_existing):
            with pytest.raises(SchemaMismatch) as caught:
                opener(pg_schema.url, schema=pg_schema.schema)
            assert "9999_from_the_future" in str(caught.value) and KNOWN[-1] in str(caught.value)
            assert caught.value.applied[-1] == "9999_from_the_future"
            assert caught.value.known == KNOWN

    def test_a_divergent_history_and_a_foreign_schema_are_refused(self, pg_schema, pg_server):
        with pg_schema.connect() as conn:
            conn.execute("CREATE TABLE customers (id int)")
        with pytest.raises(SchemaMismatch, match="not a ctrlrun store"):
            PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
        assert tables(pg_server, pg_schema.schema) == ["customers"]
        with pg_schema.connect() as conn:
            conn.execute(
                "CREATE TABLE schema_version (migration_id text PRIMARY KEY,"
                " applied_at timestamptz NOT NULL, ctrlrun_version text NOT NULL)"
            )
            conn.execute("INSERT INTO schema_version VALUES ('0001_someone_elses', now(), 'x')")
        with pytest.raises(SchemaMismatch, match="diverges"):
            PostgresStateStore(pg_schema.url, schema=pg_schema.schema)


class TestMigrations:
    def test_an_empty_schema_is_migrated_and_recorded_once(self, pg_schema):
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
        assert applied(pg_schema) == list(KNOWN)

    def test_identity_columns_compare_bytes(self, pg_schema):
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
        with pg_schema.connect() as conn:
            rows = conn.execute(
                "SELECT table_name, column_name, collation_name FROM information_schema.columns"
                " WHERE table_schema = %s AND column_name IN ('effect_key', 'action_id',"
                " 'approval_id', 'action_hash', 'receipt_id', 'hash', 'resolved_by',"
                " 'consumed_by', 'write_token')",
                [pg_schema.schema],
            ).fetchall()
            kinds = conn.execute(
                "SELECT DISTINCT data_type FROM information_schema.columns"
                " WHERE table_schema = %s AND column_name LIKE '%%_at'",
                [pg_schema.schema],
            ).fetchall()
        assert len(rows) >= 12 and {r[2] for r in rows} == {"C"}
        assert kinds == [("timestamp with time zone",)]

    def test_a_failing_migration_leaves_the_old_version(self, pg_schema, monkeypatch):
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
        broken = (
            *migration_files("postgres"),
            ("9000_broken", "CREATE TABLE {schema}.t (a int);\nNOT SQL;"),
        )
        monkeypatch.setattr("ctrlrun.store.postgres.sqltext.migration_files", lambda _d: broken)
        with pytest.raises(SchemaMismatch, match="9000_broken failed") as caught:
            PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
        assert "syntax error" in str(caught.value)
        assert applied(pg_schema) == list(KNOWN)
        assert "t" not in tables(pg_schema.server, pg_schema.schema)

    def test_a_behind_schema_is_migrated_forward(self, pg_schema, monkeypatch):
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
        ahead = (*migration_files("postgres"), ("9000_next", "CREATE TABLE {schema}.t (a int);"))
        monkeypatch.setattr("ctrlrun.store.postgres.sqltext.migration_files", lambda _d: ahead)
        with pytest.raises(SchemaMismatch, match="does not migrate"):
            PostgresStateStore.open_existing(pg_schema.url, schema=pg_schema.schema)
        assert applied(pg_schema) == list(KNOWN)
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
        assert applied(pg_schema) == [*KNOWN, "9000_next"]

    def test_concurrent_first_starts_all_open_and_migrate_once(self, pg_schema):
        barrier = threading.Barrier(8)

        def first_start() -> None:
            barrier.wait(30)
            PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()

        with ThreadPoolExecutor(8) as pool:
            for future in [pool.submit(first_start) for _ in range(8)]:
                future.result(60)
        assert applied(pg_schema) == list(KNOWN)

    @pytest.mark.parametrize(
        ("where", "sqlstate"),
        [("before_create", "42P07"), ("inside_the_first_transaction", "23505")],
    )
    def test_a_first_start_racing_another_finds_the_work_done(
        self, pg_schema, pg_proxy, caplog, where, sqlstate
    ):
        """Deterministic interleavings of two first starts: the proxy holds one opener's
        statement while the other one runs."""
        caplog.set_level(logging.INFO, logger="ctrlrun.postgres")
        if where == "before_create":  # the other opener migrates first, entirely
            pg_proxy.hold(lambda s: "schema_version (" in s and s.startswith("CREATE TABLE"))
        else:  # the first opener created everything and is about to commit
            pg_proxy.hold(lambda s: s.strip().upper() == "COMMIT")
        first = ThreadPoolExecutor(1).submit(
            PostgresStateStore, pg_proxy.url, schema=pg_schema.schema
        )
        pg_proxy.wait_held(30)
        second = ThreadPoolExecutor(1).submit(
            PostgresStateStore, pg_schema.url, schema=pg_schema.schema
        )
        if where == "before_create":
            second.result(30).close()
        else:  # the second opener's CREATE waits on the first's uncommitted table
            wait_for_lock_waiter(pg_schema.server, "CREATE TABLE%schema_version%")
        pg_proxy.release()
        first.result(30).close()
        second.result(30).close()
        assert applied(pg_schema) == list(KNOWN)
        raced = [r.migration_race for r in caplog.records if hasattr(r, "migration_race")]
        assert raced == [sqlstate]


class TestOpenExisting:
    def test_an_empty_schema_is_refused_and_left_empty(self, pg_schema, pg_server):
        with pytest.raises(SchemaMismatch, match="holds no ctrlrun schema"):
            open_store(f"{pg_schema.url}&ctrlrun_schema={pg_schema.schema}", existing=True)
        assert tables(pg_server, pg_schema.schema) == []

    def test_a_missing_schema_is_refused(self, pg_server):
        with pytest.raises(SchemaMismatch, match="does not exist"):
            PostgresStateStore.open_existing(pg_server.url, schema=unique_name("nope_"))

    def test_a_current_store_opens_for_a_role_that_may_only_read(self, pg_schema, pg_server):
        PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
        role = unique_name("reader_")
        url = pg_server.create_role(role, usage_on=[pg_schema.schema])
        try:
            with pg_server.connect() as conn:
                conn.execute(
                    sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
                        sql.Identifier(pg_schema.schema), sql.Identifier(role)
                    )
                )
            store = PostgresStateStore.open_existing(url, schema=pg_schema.schema)
            assert store.list_effects() == () and store.verify_chain().ok
            assert store.events() == ()  # a reading open appends nothing, skew or not
            store.close()
        finally:
            pg_server.drop_role(role)


class TestConnecting:
    def test_the_url_goes_to_libpq_unchanged_including_pg_variables(
        self, pg_schema, pg_server, monkeypatch
    ):
        monkeypatch.setenv("PGHOST", pg_server.host)
        monkeypatch.setenv("PGPORT", str(pg_server.port))
        monkeypatch.setenv("PGUSER", pg_server.user)
        monkeypatch.setenv("PGDATABASE", pg_server.dbname)
        store = PostgresStateStore("postgresql://", schema=pg_schema.schema)
        assert store.list_effects() == ()
        store.close()
        store = PostgresStateStore("", schema=pg_schema.schema)  # a bare conninfo string
        store.close()

    def test_a_session_search_path_pointing_elsewhere_changes_nothing(self, pg_schema, pg_server):
        decoy = unique_name("decoy_")
        pg_server.create_schema(decoy)
        try:
            with pg_server.connect() as conn:
                conn.execute(
                    sql.SQL("CREATE TABLE {}.effects (effect_key text)").format(
                        sql.Identifier(decoy)
                    )
                )
            url = pg_server.url_for(options=f"-c search_path={decoy}")
            store = PostgresStateStore(url, schema=pg_schema.schema)
            from ctrlrun.store.protocol import StartRequest

            store.start_action(StartRequest(action_id="act_1", effect_key="k"))
            assert store.get_effect("k") is not None
            store.close()
            with pg_server.connect() as conn:
                decoyed = conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.effects").format(sql.Identifier(decoy))
                )
                assert decoyed.fetchone()[0] == 0
        finally:
            pg_server.drop_schema(decoy)

    def test_an_unreachable_server_is_a_store_error_without_the_url(self):
        url = "postgresql://someone:s3cret@127.0.0.1:1/db?connect_timeout=2"
        with pytest.raises(StoreError) as caught:
            PostgresStateStore(url)
        assert "s3cret" not in str(caught.value)

    def test_create_schema_creates_once(self, pg_server):
        name = unique_name("made_")
        PostgresStateStore.create_schema(pg_server.url, name)
        try:
            with pytest.raises(StoreError, match=name):
                PostgresStateStore.create_schema(pg_server.url, name)
            PostgresStateStore(pg_server.url, schema=name).close()
        finally:
            pg_server.drop_schema(name)
        with pytest.raises(InvalidArgument):
            PostgresStateStore.create_schema(pg_server.url, 'x"; DROP')


def test_the_driver_is_loaded_only_by_a_store_and_its_absence_names_the_extra():
    probe = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None  # as if the extra were not installed
        import ctrlrun, ctrlrun.postgres
        from ctrlrun.errors import MissingDependency
        assert not [m for m in sys.modules if m.startswith("psycopg") and sys.modules[m]]
        try:
            ctrlrun.postgres.PostgresStateStore("postgresql://x/y")
        except MissingDependency as exc:
            print(exc.module, exc.extra, exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == (
        "psycopg postgres psycopg is not installed: ctrlrun's 'postgres' extra provides it;"
        " in the ctrlrun checkout run pip install '.[postgres]'"
    )
    assert issubclass(MissingDependency, ImportError)


def test_a_forked_child_connects_anew_and_never_closes_the_parents_session(direct):
    from ctrlrun.store.protocol import StartRequest

    direct.start_action(StartRequest(action_id="act_parent", effect_key="k_parent"))
    parent_pid = direct._engine.connections.current().info.backend_pid
    pid = os.fork()
    if pid == 0:  # the child: its own connection; closing the store must not touch the parent's
        code = 1
        try:
            direct.start_action(StartRequest(action_id="act_child", effect_key="k_child"))
            mine = direct._engine.connections.current().info.backend_pid
            direct.close()
            code = 0 if mine != parent_pid else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert direct._engine.connections.current().info.backend_pid == parent_pid  # still alive
    assert direct.get_effect("k_child").action_id == "act_child"
    direct.start_action(StartRequest(action_id="act_parent2", effect_key="k_parent2"))
