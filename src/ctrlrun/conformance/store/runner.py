"""Running the cases: selection, one scratch storage per case, and the verdicts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from ctrlrun.errors import InvalidArgument

from . import (
    approvals,
    durability,
    evidence,
    leases,
    migrations,
    outcomes,
    quorum,
    requests,
    reservation,
    resolution,
)
from .backends import StoreBackend
from .framework import Case, CaseContext, CaseFailed, NotApplicable
from .report import CaseResult, Report, Status

CASES: Final[tuple[Case, ...]] = (
    *reservation.CASES,
    *approvals.CASES,
    *requests.CASES,
    *quorum.CASES,
    *outcomes.CASES,
    *resolution.CASES,
    *leases.CASES,
    *durability.CASES,
    *evidence.CASES,
    *migrations.CASES,
)
SUITES: Final = tuple(dict.fromkeys(case.suite for case in CASES))

Progress = Callable[[int, int, str, CaseResult | None], None]
"""Called with (index, total, ``suite/case``, None) as a case starts and with its result as it
ends."""


def select(only: Iterable[str]) -> tuple[Case, ...]:
    """The cases named by ``only`` (case names, ``suite/case`` or whole suites), in catalogue
    order; every case when ``only`` is empty. ``InvalidArgument`` for a name that is none."""
    wanted = [only] if isinstance(only, str) else list(only)
    if not wanted:
        return CASES
    names = {c.name for c in CASES} | {f"{c.suite}/{c.name}" for c in CASES} | set(SUITES)
    unknown = [name for name in wanted if name not in names]
    if unknown:
        raise InvalidArgument(
            f"no such conformance case or suite: {', '.join(unknown)} (suites: {', '.join(SUITES)})"
        )
    return tuple(c for c in CASES if {c.name, f"{c.suite}/{c.name}", c.suite} & set(wanted))


def run_case(backend: StoreBackend, case: Case, processes: int) -> CaseResult:
    """One case on fresh storage; its verdict. A store exception fails the case (naming it);
    ``KeyboardInterrupt`` and ``SystemExit`` propagate."""
    began = time.monotonic()
    status, reason, detail = Status.PASS, "", ""
    try:
        with backend.scratch(case.name) as scratch:
            detail = case.run(CaseContext(scratch, processes, case.name))
    except CaseFailed as failed:
        status, reason = Status.FAIL, failed.reason
    except NotApplicable as na:
        status, reason = Status.NOT_APPLICABLE, na.reason
    except Exception as exc:
        status, reason = Status.FAIL, f"raised {type(exc).__name__}: {exc}"
    return CaseResult(case.suite, case.name, status, reason, detail, time.monotonic() - began)


def run(
    backend: StoreBackend,
    *,
    only: Sequence[str] = (),
    processes: int = 8,
    progress: Progress | None = None,
) -> Report:
    """Grade ``backend`` against the store contract; see the package docstring."""
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 2:
        raise InvalidArgument(f"processes must be an integer >= 2, got {processes!r}")
    cases = select(only)
    results: list[CaseResult] = []
    for index, case in enumerate(cases, start=1):
        name = f"{case.suite}/{case.name}"
        if progress is not None:
            progress(index, len(cases), name, None)
        result = run_case(backend, case, processes)
        results.append(result)
        if progress is not None:
            progress(index, len(cases), name, result)
    leaked = tuple(getattr(backend, "leaked", ()))
    return Report(backend.name, tuple(results), leaked)
