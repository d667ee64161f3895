"""What a conformance run found, counted per case.

A case passes, fails (with a reason), or is not applicable (with a reason). Not applicable is
never a pass and never in the denominator; a run in which nothing applied is not ok.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

REPORT_SCHEMA: Final = "ctrlrun.conformance/v1"


class Status(StrEnum):
    """How one case ended."""

    PASS = "pass"  # noqa: S105 - a verdict, not a password
    FAIL = "fail"
    NOT_APPLICABLE = "n/a"


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case's verdict. ``reason`` says why it failed or did not apply; ``detail`` what a
    passing case established (counts, states seen)."""

    suite: str
    case: str
    status: Status
    reason: str = ""
    detail: str = ""
    seconds: float = 0.0

    @property
    def name(self) -> str:
        """``suite/case``."""
        return f"{self.suite}/{self.case}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready rendering."""
        return {
            "suite": self.suite,
            "case": self.case,
            "status": str(self.status),
            "reason": self.reason,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class Report:
    """Every case's result for one backend, plus warnings (a scratch schema that could not be
    dropped, for instance). ``ok`` iff no case failed and at least one passed."""

    backend: str
    results: tuple[CaseResult, ...]
    warnings: tuple[str, ...] = ()

    def _count(self, status: Status) -> int:
        return sum(1 for result in self.results if result.status is status)

    @property
    def passed(self) -> int:
        """Cases that passed."""
        return self._count(Status.PASS)

    @property
    def failed(self) -> int:
        """Cases that failed."""
        return self._count(Status.FAIL)

    @property
    def not_applicable(self) -> int:
        """Cases that did not apply (never counted as passed)."""
        return self._count(Status.NOT_APPLICABLE)

    @property
    def applicable(self) -> int:
        """The denominator: cases that passed or failed."""
        return self.passed + self.failed

    @property
    def ok(self) -> bool:
        """No failure, and at least one case applied and passed."""
        return self.failed == 0 and self.passed > 0

    def result(self, name: str) -> CaseResult:
        """The result of case ``name`` (``case`` or ``suite/case``); KeyError if absent."""
        for result in self.results:
            if name in (result.case, result.name):
                return result
        raise KeyError(name)

    def summary(self) -> str:
        """One line: ``N/M applicable cases pass``, the failures, the N/As."""
        text = f"{self.passed}/{self.applicable} applicable cases pass"
        if self.failed:
            failing = ", ".join(r.case for r in self.results if r.status is Status.FAIL)
            text += f"; {self.failed} FAIL ({failing})"
        if self.not_applicable:
            text += f"; {self.not_applicable} not applicable"
        if not self.applicable:
            text += "; nothing applied, so nothing is proven"
        return f"{text} — {'ok' if self.ok else 'NOT OK'}"

    def to_text(self) -> str:
        """One row per case, then the warnings, then the summary line."""
        width = max((len(r.name) for r in self.results), default=0)
        lines = [f"store conformance: {self.backend}"]
        for r in self.results:
            label = {Status.PASS: "PASS", Status.FAIL: "FAIL", Status.NOT_APPLICABLE: "N/A"}
            note = r.detail if r.status is Status.PASS else r.reason
            lines.append(f"  {r.name:<{width}}  {label[r.status]:<4}  {note}".rstrip())
        lines += [f"warning: {warning}" for warning in self.warnings]
        lines.append(self.summary())
        return "\n".join(lines)

    def to_json(self) -> str:
        """The report as JSON (schema ``ctrlrun.conformance/v1``)."""
        document = {
            "schema": REPORT_SCHEMA,
            "backend": self.backend,
            "ok": self.ok,
            "passed": self.passed,
            "failed": self.failed,
            "not_applicable": self.not_applicable,
            "cases": [result.to_dict() for result in self.results],
            "warnings": list(self.warnings),
        }
        return json.dumps(document, indent=2, ensure_ascii=False)
