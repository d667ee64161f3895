"""The real SQLite store passes every case with no N/A; counting, selection and rendering."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ctrlrun.conformance.store import CASES, SUITES, SQLiteBackend, Status, run
from ctrlrun.conformance.store.report import CaseResult, Report
from ctrlrun.errors import InvalidArgument
from support.subprocess_env import fast_children


@pytest.fixture(scope="module")
def sqlite_report(tmp_path_factory, bytecode_dir):
    with pytest.MonkeyPatch.context() as mp:
        fast_children(mp, bytecode_dir)
        return run(SQLiteBackend(tmp_path_factory.mktemp("conformance")))


def test_sqlite_passes_every_case_with_zero_not_applicable(sqlite_report):
    failing = [(r.name, r.reason) for r in sqlite_report.results if r.status is not Status.PASS]
    assert failing == []
    assert sqlite_report.ok
    assert sqlite_report.passed == len(CASES) and sqlite_report.not_applicable == 0
    assert [r.case for r in sqlite_report.results] == [c.name for c in CASES]


def test_every_suite_of_the_brief_is_present():
    assert SUITES == (
        "reservation",
        "approvals",
        "outcomes",
        "resolution",
        "leases",
        "durability",
        "evidence",
        "migrations",
    )
    assert all(case.contract for case in CASES)
    assert len({case.name for case in CASES}) == len(CASES)


def test_the_scratch_directories_are_removed(tmp_path):
    run(SQLiteBackend(tmp_path), only=["retry-table", "newer-schema-refused"])
    assert list(tmp_path.iterdir()) == []


def test_the_text_report_has_a_row_per_case_and_a_summary(sqlite_report):
    text = sqlite_report.to_text().splitlines()
    assert len(text) == len(CASES) + 2
    assert text[-1] == f"{len(CASES)}/{len(CASES)} applicable cases pass — ok"
    document = json.loads(sqlite_report.to_json())
    assert document["schema"] == "ctrlrun.conformance/v1" and document["ok"] is True
    assert len(document["cases"]) == len(CASES)


def test_selection_by_case_suite_or_path():
    assert [r.case for r in run(SQLiteBackend(), only=["leases"]).results] == [
        "expired-lease-ambiguous",
        "reads-never-transition",
        "close-is-not-a-fence",
    ]
    report = run(SQLiteBackend(), only=["evidence/receipt-chain", "transitions"])
    assert [r.case for r in report.results] == ["transitions", "receipt-chain"]


@pytest.mark.parametrize("only", [["no-such-case"], ["reservation", "bogus"]])
def test_an_unknown_name_raises(only):
    with pytest.raises(InvalidArgument, match="no such conformance case"):
        run(SQLiteBackend(), only=only)


def test_fewer_than_two_contenders_is_refused():
    with pytest.raises(InvalidArgument, match="processes"):
        run(SQLiteBackend(), processes=1)


def test_not_applicable_is_never_a_pass_and_nothing_applied_is_not_ok():
    report = Report(
        "x",
        (
            CaseResult("s", "a", Status.NOT_APPLICABLE, "private storage"),
            CaseResult("s", "b", Status.NOT_APPLICABLE, "private storage"),
        ),
    )
    assert (report.passed, report.applicable, report.ok) == (0, 0, False)
    assert "nothing applied" in report.summary()
    mixed = Report("x", (*report.results, CaseResult("s", "c", Status.PASS)))
    assert (mixed.passed, mixed.applicable, mixed.ok) == (1, 1, True)
    assert "1/1 applicable cases pass; 2 not applicable" in mixed.summary()


def loaded_after(statement: str, wanted: str) -> str:
    """The modules matching the expression ``wanted`` (over ``m``) after running ``statement``
    in a fresh interpreter."""
    probe = f"import sys; {statement}; print(sorted(m for m in sys.modules if {wanted}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_importing_ctrlrun_imports_neither_proof():
    wanted = "m.startswith(('ctrlrun.conformance', 'ctrlrun.verify'))"
    assert loaded_after("import ctrlrun", wanted) == "[]"


def test_the_suite_needs_nothing_beyond_the_standard_library_and_ctrlrun():
    wanted = "m.split('.')[0] in {'pytest', 'hypothesis', 'psycopg', 'click', 'yaml'}"
    assert loaded_after("import ctrlrun.conformance.store", wanted) == "[]"
