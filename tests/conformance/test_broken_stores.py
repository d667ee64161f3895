"""The suite tests itself: every deliberately broken store fails its named case for its named
reason, every suite is the target of at least one fixture, and a declared N/A is checked."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from ctrlrun.conformance.store import CASES, SUITES, SQLiteBackend, Status, run
from support.broken_backends import FIXTURES, BrokenBackend
from support.subprocess_env import inject

SUITE_OF = {case.name: case.suite for case in CASES}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_each_broken_store_fails_its_case_for_its_reason(name, monkeypatch, tmp_path):
    fixture = FIXTURES[name]
    if fixture.in_children:
        inject(monkeypatch, broken_store=name)
    result = run(BrokenBackend(fixture, tmp_path), only=[fixture.case]).result(fixture.case)
    assert result.status is Status.FAIL, result
    assert fixture.reason in result.reason, result.reason


def test_every_pinned_case_exists_and_every_suite_is_targeted():
    assert {f.case for f in FIXTURES.values()} <= set(SUITE_OF)
    assert {SUITE_OF[f.case] for f in FIXTURES.values()} == set(SUITES)


def test_without_injection_the_children_run_the_real_store(tmp_path):
    # The same fixture, wrapped only in this process: the children open the real store and
    # the case passes — so the failure above is the injected mutation reaching them, and the
    # in-process and cross-process cases are not redundant.
    fixture = FIXTURES["two-winners-in-children"]
    report = run(BrokenBackend(fixture, tmp_path), only=["one-winner-in-process", fixture.case])
    assert report.result("one-winner-in-process").status is Status.FAIL
    crossed = report.result(fixture.case)
    assert crossed.status is Status.PASS, crossed.reason
    assert "SQLiteStateStore" in crossed.detail


class PrivateScratch:
    """Honestly private storage: every open is a new file; no address, no second handle."""

    def __init__(self, real) -> None:
        self.real, self.count = real, 0

    def open(self, clock=None):
        from ctrlrun.store.sqlite import SQLiteStateStore

        self.count += 1
        return self.real.keep(SQLiteStateStore(self.real.path.parent / f"{self.count}.db"))

    def reopen(self, clock=None):
        return None

    def url(self):
        return None

    def mark_newer_schema(self, migration_id):
        raise AssertionError("not used")


class PrivateBackend:
    name = "private"

    def __init__(self, directory) -> None:
        self.real = SQLiteBackend(directory)

    @contextmanager
    def scratch(self, label):
        with self.real.scratch(label) as real:
            yield PrivateScratch(real)


SHARED_STORAGE = ["one-winner-cross-process", "consume-cross-process", "durability"]


def test_an_honest_na_is_reported_with_its_reason_and_never_counted(tmp_path):
    report = run(PrivateBackend(tmp_path), only=SHARED_STORAGE)
    assert {r.status for r in report.results} == {Status.NOT_APPLICABLE}
    assert len(report.results) == 5 and report.applicable == 0
    assert all("(checked)" in r.reason for r in report.results)
    assert not report.ok


def test_a_run_with_an_na_and_passes_counts_only_the_passes(tmp_path):
    report = run(PrivateBackend(tmp_path), only=["consume-cross-process", "retry-table"])
    assert (report.passed, report.not_applicable, report.applicable, report.ok) == (1, 1, 1, True)
