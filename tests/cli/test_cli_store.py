"""Which store a command opens, and every way opening it is refused: one line, exit 1, nothing
created, nothing migrated, never a traceback."""

from __future__ import annotations

import sqlite3
import sys

import pytest

from ctrlrun.store.queries import migration_files
from support.cli import refused, run

READERS = [
    ("effects",),
    ("effects", "--json"),
    ("receipts",),
    ("receipts", "--verify-chain"),
    ("approvals", "--pending"),
    ("inspect", "act_x"),
    ("resolve", "refund:x", "--failed"),
    ("approve", "apr_x"),
    ("deny", "apr_x"),
]
KNOWN = tuple(m for m, _ in migration_files("sqlite"))


def applied(path):
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT migration_id FROM schema_version")]


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_missing_store_is_refused_and_not_created(project, args):
    line = refused(run(*args), "no ctrlrun store at", str(project / ".ctrlrun" / "state.db"))
    assert "ctrlrun init" in line
    assert not (project / ".ctrlrun").exists()
    elsewhere = project / "elsewhere.db"
    refused(run(*args, "--store-url", f"sqlite://{elsewhere}"), str(elsewhere))
    assert not elsewhere.exists()


def test_a_behind_store_is_refused_by_receipts_without_migrating_it(scene, monkeypatch):
    scene.committed()
    scene.close()
    newer = (*migration_files("sqlite"), ("9000_next", "CREATE TABLE later (a);"))
    monkeypatch.setattr("ctrlrun.store.sqlite.migration_files", lambda _dialect: newer)
    line = refused(run("receipts"), "behind", "does not migrate")
    assert "9000_next" in line or KNOWN[-1] in line
    assert applied(scene.path) == list(KNOWN)
    with sqlite3.connect(scene.path) as conn:
        assert (
            conn.execute("SELECT name FROM sqlite_master WHERE name = 'later'").fetchone() is None
        )


def test_a_store_ahead_of_this_ctrlrun_is_refused(scene):
    scene.close()
    with sqlite3.connect(scene.path) as conn:
        conn.execute("INSERT INTO schema_version VALUES ('9999_future', 'x', '9.9.9')")
    refused(run("effects"), "9999_future", "upgrade ctrlrun")


def test_a_corrupt_file_and_an_empty_one_are_refused(project):
    (project / ".ctrlrun").mkdir()
    store = project / ".ctrlrun" / "state.db"
    store.write_bytes(b"this is not a database at all, just bytes" * 100)
    refused(run("receipts"), "file is not a database")
    store.unlink()
    sqlite3.connect(store).close()
    refused(run("approvals"), "holds no ctrlrun schema")
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


def test_a_postgres_url_without_the_backend_is_a_clear_refusal(project, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctrlrun.postgres", None)  # as if it were not installed
    refused(run("receipts", "--store-url", "postgresql://u:p@localhost/db"), "no Postgres")


@pytest.mark.parametrize(
    ("url", "fragment"),
    [("mysql://x/y", "unsupported store URL"), ("sqlite://", "names no file")],
)
def test_a_malformed_url_is_refused(project, url, fragment):
    refused(run("effects", "--store-url", url), fragment)


def test_the_environment_names_the_store_and_the_flag_wins(scene, monkeypatch, tmp_path):
    scene.committed()
    (scene.root / "ctrlrun.yaml").unlink()  # with a URL, no policy is needed
    monkeypatch.setenv("CTRLRUN_STORE_URL", scene.url)
    assert "refund:pay_1" in run("effects").stdout
    other = tmp_path / "other.db"
    refused(run("effects", "--store-url", f"sqlite://{other}"), str(other))


def test_the_default_store_is_beside_the_policy_named_by_ctrlrun_config(scene, monkeypatch):
    scene.committed()
    elsewhere = scene.root / "sub"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    refused(run("effects"), "no policy file at", str(elsewhere / "ctrlrun.yaml"))
    monkeypatch.setenv("CTRLRUN_CONFIG", str(scene.root / "ctrlrun.yaml"))
    assert "refund:pay_1" in run("effects").stdout


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ("", "CTRLRUN_CONFIG is set but empty"),
        ("{root}", "cannot read the policy file"),
        ("{root}/absent.yaml", "no policy file at"),
    ],
)
def test_an_unreadable_policy_is_one_clear_line(scene, monkeypatch, config, fragment):
    monkeypatch.setenv("CTRLRUN_CONFIG", config.format(root=scene.root))
    for args in READERS:
        refused(run(*args), fragment)


def test_a_malformed_policy_does_not_hide_the_evidence(scene):
    scene.committed()
    (scene.root / "ctrlrun.yaml").write_bytes(b"schema: [unclosed\n\xff")
    assert "refund:pay_1" in run("effects").stdout


def test_an_unexpected_failure_is_one_line_unless_debugging(scene, monkeypatch):
    def broken(self, state=None):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("ctrlrun.store.sqlite.SQLiteStateStore.list_effects", broken)
    refused(run("effects"), "unexpected RuntimeError: disk on fire", "CTRLRUN_DEBUG")
    monkeypatch.setenv("CTRLRUN_DEBUG", "1")
    from click.testing import CliRunner

    from ctrlrun.cli import main

    result = CliRunner().invoke(main, ["effects"])
    assert isinstance(result.exception, RuntimeError)


def test_an_argument_that_is_not_utf8_is_refused(scene):
    for args in (("inspect", "\udcff"), ("resolve", "k\udcff", "--failed"), ("deny", "\udcff")):
        refused(run(*args), "not valid UTF-8")


def test_usage_errors_exit_2(project):
    for args in (("nonsense",), ("inspect",), ("approve",), ("receipts", "--last", "x")):
        result = run(*args)
        assert result.exit_code == 2 and result.stdout == "", args
