"""``ctrlrun conformance --store-url URL``: progress on stderr, the report on stdout, exit 0/1/2."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from ctrlrun.cli import main
from support.broken_backends import FIXTURES, BrokenBackend


def conformance(*args: str):
    return CliRunner().invoke(main, ["conformance", *args], catch_exceptions=False)


def test_a_passing_run_exits_0_with_progress_and_report(tmp_path):
    url = f"sqlite://{tmp_path / 'state.db'}"
    result = conformance("--store-url", url, "--only", "leases,retry-table", "--progress")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "4/4 applicable cases pass — ok"
    assert "[ 1/4] reservation/retry-table … PASS" in result.stderr
    assert list(tmp_path.iterdir()) == []  # scratch directories removed; state.db never made
    quiet = conformance("--store-url", url, "--only", "retry-table")
    assert quiet.stderr == ""  # not a terminal, not asked: no progress


def test_json_output(tmp_path):
    url = f"sqlite://{tmp_path / 'state.db'}"
    result = conformance("--store-url", url, "--only", "binding", "--json")
    document = json.loads(result.stdout)
    assert result.exit_code == 0 and document["ok"] and document["cases"][0]["case"] == "binding"


def test_a_failing_backend_exits_1(tmp_path, monkeypatch):
    command = sys.modules["ctrlrun.cli.conformance"]  # the package attribute is the command
    fixture = FIXTURES["guesses-failed"]
    monkeypatch.setattr(command, "backend_for", lambda url: BrokenBackend(fixture, tmp_path))
    result = conformance("--store-url", "sqlite:///x/y.db", "--only", "transitions")
    assert result.exit_code == 1
    assert "FAIL" in result.stdout and "NOT OK" in result.stdout.splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--store-url", "sqlite:///no/such/dir/state.db"], "Error: no directory /no/such/dir"),
        (["--store-url", "mysql://x"], "Error: unsupported store URL"),
        (["--store-url", "sqlite:///tmp/s.db", "--only", "nope"], "Error: no such conformance"),
        (["--store-url", "sqlite:///tmp/s.db", "--processes", "1"], "Error: --processes"),
    ],
)
def test_refused_configuration_exits_2(args, message):
    result = conformance(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message), result.stderr
