"""Store URLs: the driver gets the URL byte for byte (only ``ctrlrun_schema`` is removed), a
secret in one is never shown in any refusal or log line, an in-memory SQLite store and an empty
URL are refused, and the ways docs/postgres.md gives to keep the password out of ``ps`` work."""

from __future__ import annotations

import logging
import socket

import pytest
from psycopg.conninfo import conninfo_to_dict

import ctrlrun
from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.errors import InvalidArgument
from ctrlrun.postgres import PostgresStateStore
from ctrlrun.store import open_store, parse_store_url
from ctrlrun.store.url import redacted
from support.cli import refused, run

SECRET = "s3cr3t-XYZ"


@pytest.mark.parametrize(
    ("url", "target"),
    [
        (
            "postgresql://app@db/x?options=-c%20search_path%3Dfoo&ctrlrun_schema=s1"
            "&application_name=a+b%2Bc&sslmode=require",
            "postgresql://app@db/x?options=-c%20search_path%3Dfoo&application_name=a+b%2Bc"
            "&sslmode=require",
        ),
        ("postgresql://app@db/x?ctrlrun_schema=s1", "postgresql://app@db/x"),
        ("postgres://db/x?a=%7E&&b=", "postgres://db/x?a=%7E&&b="),
        ("postgresql://?service=ops&ctrlrun_schema=s1", "postgresql://?service=ops"),
    ],
)
def test_the_driver_gets_the_url_byte_for_byte(url, target):
    assert parse_store_url(url).target == target


def test_the_schema_parameter_is_decoded_once():
    assert parse_store_url("postgresql://db/x?ctrlrun_schema=s%5F1").schema == "s_1"
    with pytest.raises(InvalidArgument, match="2 times"):
        parse_store_url("postgresql://db/x?ctrlrun_schema=a&ctrlrun_schema=b")


@pytest.mark.parametrize(
    "url",
    [
        f"host=db user=app password={SECRET} dbname=x",  # a key/value connection string
        f"postgresql://app:{SECRET}%zz@db/x",  # a bad escape libpq would quote
        f"postgresql://app:{SECRET}%4@db/x",
        f"postgresql://db/x?password={SECRET}%G1",
        f"mysql://app:{SECRET}@db/x",
        f"{SECRET}",
    ],
)
def test_a_refused_url_never_shows_its_secret(url, empty, caplog):
    with pytest.raises(InvalidArgument) as caught:
        parse_store_url(url)
    assert SECRET not in str(caught.value)
    caplog.set_level(logging.DEBUG)
    for command in (("effects",), ("init",), ("conformance",), ("serve",)):
        result = run(*command, "--store-url", url)
        assert result.exit_code in (1, 2), (command, result.output)  # conformance: 2
        assert SECRET not in result.output
        assert "Error: " in result.stderr
    assert SECRET not in caplog.text
    assert not (empty / "ctrlrun.yaml").exists()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_driver_failure_never_shows_the_password(empty, caplog):
    caplog.set_level(logging.DEBUG)
    url = f"postgresql://app:{SECRET}@127.0.0.1:{closed_port()}/x?password={SECRET}"
    line = refused(run("effects", "--store-url", url), "opening the Postgres store")
    assert SECRET not in line and SECRET not in caplog.text


def test_a_printed_url_hides_every_password():
    shown = redacted(f"postgresql://app:{SECRET}@db:5432/x?sslpassword={SECRET}&password=p&a=1")
    assert shown == "postgresql://app:***@db:5432/x?sslpassword=***&password=***&a=1"
    assert redacted(f"host=db password={SECRET}") == "<not a URL>"
    assert redacted("sqlite:///tmp/state.db") == "sqlite:///tmp/state.db"


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite://:memory:", "sqlite://file:x"])
def test_an_in_memory_sqlite_store_is_refused(url, empty):
    with pytest.raises(InvalidArgument, match="in-memory database would lose every"):
        open_store(url)
    refused(run("init", "--store-url", url), "in-memory")
    refused(run("effects", "--store-url", url), "in-memory")
    assert list(empty.iterdir()) == [] and not (empty.anchor and (empty / ":memory:").exists())


def test_an_empty_store_url_is_refused_never_the_default(project, monkeypatch):
    (project / ".ctrlrun").mkdir()
    ctrlrun.SQLiteStateStore(project / ".ctrlrun" / "state.db").close()  # a default to fall to
    for command in (("effects",), ("receipts",), ("plans", "list"), ("outbox", "list")):
        refused(run(*command, "--store-url", ""), "--store-url is empty")
        refused(run(*command, "--store-url", "  "), "--store-url is empty")
    monkeypatch.setenv("CTRLRUN_STORE_URL", "")
    for command in (("effects",), ("init",), ("approvals",), ("operations", "list")):
        refused(run(*command), "CTRLRUN_STORE_URL is empty")
    refused(run("conformance", "--store-url", ""), "is empty")
    assert run("verify", "--store-url", "").exit_code == 2
    with pytest.raises(InvalidArgument, match="the store URL is empty"):
        ctrlrun.Control.from_file()


@pytest.mark.postgres
def test_the_query_reaches_the_server_as_written(pg_schema):
    url = with_schema(pg_schema.url, pg_schema.schema)
    url += "&application_name=ctrl%2Brun%20a+b"
    store = open_store(url)
    try:
        shown = store.transact(lambda txn: txn.connection.execute("SHOW application_name"))
        assert shown.fetchone()["application_name"] == "ctrl+run a+b"  # '+' is not a space
    finally:
        store.close()


@pytest.mark.postgres
def test_a_service_file_keeps_the_connection_out_of_the_url(empty, pg_schema, monkeypatch):
    PostgresStateStore(pg_schema.url, schema=pg_schema.schema).close()
    settings = conninfo_to_dict(pg_schema.url)
    service = empty / "pg_service.conf"
    service.write_text("[ctrlrun]\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
    monkeypatch.setenv("PGSERVICEFILE", str(service))
    url = f"postgresql://?service=ctrlrun&ctrlrun_schema={pg_schema.schema}"
    listed = run("effects", "--store-url", url)
    assert listed.exit_code == 0, listed.output
    assert listed.stdout == "no effects yet\n"
