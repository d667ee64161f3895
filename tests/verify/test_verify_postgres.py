"""``ctrlrun verify --store-url postgresql://…`` on the real server: every guarantee of the
sample policy passes, G11 included (both windows opened on the real store); every scratch
schema is dropped; ``public`` and the operator's own schema (named in the URL, and ignored)
are left exactly as they were — also when a guarantee raises or the run is interrupted."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctrlrun.cli import main
from ctrlrun.config import load_policy_text
from ctrlrun.conformance.store.backends import with_schema
from ctrlrun.postgres import PostgresStateStore
from support.pg_sql import objects_in, schemas_like
from support.policies import POLICY

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

GUARANTEES = [f"G{n}" for n in range(1, 13)]


def receipt_ids(pg_schema) -> list[str]:
    store = PostgresStateStore.open_existing(pg_schema.url, schema=pg_schema.schema)
    try:
        return [r.receipt_id for r in store.receipts()]
    finally:
        store.close()


@pytest.fixture
def operator(pg_schema):
    """The operator's store, in its own schema, holding one receipt."""
    store = PostgresStateStore(pg_schema.url, schema=pg_schema.schema)
    store.record((), {"receipt_id": "rcp_operator", "action_id": "act_op", "result": "committed"})
    store.close()
    return pg_schema


def test_every_guarantee_passes_on_postgres_and_nothing_is_left_behind(
    pg_server, operator, tmp_path
):
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    public, theirs = objects_in(pg_server, "public"), objects_in(pg_server, operator.schema)
    url = with_schema(pg_server.url, operator.schema)  # verify never uses a named schema
    result = CliRunner().invoke(
        main, ["verify", "--policy", str(policy), "--store-url", url, "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    statuses = {g["id"]: g["status"] for g in document["guarantees"]}
    assert statuses == dict.fromkeys(GUARANTEES, "pass"), result.stdout
    assert document["summary"] == "12/12 applicable guarantees pass"
    g11 = next(g for g in document["guarantees"] if g["id"] == "G11")
    assert "connection lost idle" in g11["detail"] and "lost at COMMIT" in g11["detail"]
    assert g11["detail"].count("blind retry refused") == 2
    assert "FAILED" not in g11["detail"]
    assert schemas_like(pg_server, "ctrlrun_verify_") == []
    assert objects_in(pg_server, "public") == public
    assert objects_in(pg_server, operator.schema) == theirs
    assert receipt_ids(operator) == ["rcp_operator"]


def _breaking(exc: BaseException):
    """A scenario that opens its scratch store (so its schema exists), then raises ``exc``."""

    def scenario(lab):
        lab.store.record((), {"receipt_id": "rcp_scratch", "action_id": "a", "result": "x"})
        assert lab.store.receipts()  # the scratch schema is really there when it raises
        raise exc

    return scenario


def test_a_guarantee_that_raises_is_an_error_and_its_schema_is_dropped(
    pg_server, tmp_path, monkeypatch
):
    import ctrlrun.verify.runner as runner

    broken = runner.Guarantee("G3", "duplicate effect refused", _breaking(KeyError("bug")))
    monkeypatch.setattr(runner, "GUARANTEES", (broken,))
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    result = CliRunner().invoke(
        main, ["verify", "--policy", str(policy), "--store-url", pg_server.url, "--json"]
    )
    assert result.exit_code == 3, result.output
    (g3,) = json.loads(result.stdout)["guarantees"]
    assert g3["status"] == "error" and "KeyError" in g3["detail"]
    assert schemas_like(pg_server, "ctrlrun_verify_") == []


def test_a_run_ended_by_an_interrupt_still_drops_its_schema(pg_server, monkeypatch):
    import ctrlrun.verify.runner as runner

    broken = runner.Guarantee("G3", "duplicate effect refused", _breaking(KeyboardInterrupt()))
    monkeypatch.setattr(runner, "GUARANTEES", (broken,))
    with pytest.raises(KeyboardInterrupt):
        runner.run(load_policy_text(POLICY), store_url=pg_server.url)
    assert schemas_like(pg_server, "ctrlrun_verify_") == []
