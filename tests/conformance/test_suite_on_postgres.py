"""The real Postgres store passes every conformance case with zero N/A — the cross-process
ones included (eight OS processes opening the scratch schema by URL) — and every scratch
schema is dropped afterwards, whatever a case did."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ctrlrun.cli import main
from ctrlrun.conformance.store import CASES, PostgresBackend, Status, run
from ctrlrun.conformance.store.backends import with_schema
from support.pg_sql import objects_in, schemas_like

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def postgres_run(pg_server):
    before = objects_in(pg_server, "public")
    backend = PostgresBackend(pg_server.url)
    report = run(backend)
    return report, backend, before


def test_postgres_passes_every_case_with_zero_not_applicable(postgres_run):
    report, _, _ = postgres_run
    failing = [(r.name, r.reason) for r in report.results if r.status is not Status.PASS]
    assert failing == []
    assert report.ok and report.passed == len(CASES) and report.not_applicable == 0
    assert report.backend.startswith("postgres (")
    crossed = {r.case: r.detail for r in report.results}
    assert "8 processes arrived" in crossed["one-winner-cross-process"]
    assert "PostgresStateStore" in crossed["one-winner-cross-process"]
    assert "8 processes arrived" in crossed["consume-cross-process"]


def test_every_scratch_schema_is_dropped_and_public_is_untouched(postgres_run, pg_server):
    _, backend, before = postgres_run
    assert backend.leaked == []
    assert schemas_like(pg_server, "ctrlrun_conf_") == []
    assert objects_in(pg_server, "public") == before


def test_the_command_line_grades_postgres_and_ignores_a_named_schema(pg_server, pg_schema):
    url = with_schema(pg_server.url, pg_schema.schema)
    result = CliRunner().invoke(
        main,
        ["conformance", "--store-url", url, "--only", "retry-table,newer-schema-refused"],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "2/2 applicable cases pass — ok"
    assert objects_in(pg_server, pg_schema.schema) == []  # the named schema was never used
    assert schemas_like(pg_server, "ctrlrun_conf_") == []


def _breaking(exc: BaseException):
    def case(ctx) -> str:
        """Opens its scratch store (so the schema exists), then raises."""
        ctx.scratch.open(ctx.clock).record(
            (), {"receipt_id": "rcp_x", "action_id": "a", "result": "x"}
        )
        raise exc

    return case


def test_a_case_that_raises_fails_and_its_schema_is_dropped(pg_server):
    from ctrlrun.conformance.store.framework import Case
    from ctrlrun.conformance.store.runner import run_case

    backend = PostgresBackend(pg_server.url)
    result = run_case(backend, Case.of("x", "raises", _breaking(KeyError("bug"))), processes=2)
    assert result.status is Status.FAIL and "raised KeyError" in result.reason
    assert backend.leaked == [] and schemas_like(pg_server, "ctrlrun_conf_") == []


def test_an_interrupted_case_still_drops_its_schema(pg_server):
    from ctrlrun.conformance.store.framework import Case
    from ctrlrun.conformance.store.runner import run_case

    backend = PostgresBackend(pg_server.url)
    with pytest.raises(KeyboardInterrupt):
        run_case(backend, Case.of("x", "interrupted", _breaking(KeyboardInterrupt())), 2)
    assert schemas_like(pg_server, "ctrlrun_conf_") == []
