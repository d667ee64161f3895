"""What ``ctrlrun verify`` found: one row per guarantee, a summary, and the exit code.

Statuses: PASS; FAIL (the guarantee or its positive control did not hold — with a
counterexample); N/A (a true reason about the document; never a pass, never in the
denominator); ERROR (verify's own failure). Exit codes: 0 every applicable guarantee passed
and at least one applied; 1 a guarantee failed; 2 nothing applicable (or the configuration
was refused, decided before a report exists); 3 verify's own error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final
from xml.etree import ElementTree as ET

REPORT_SCHEMA: Final = "ctrlrun.verify/v1"


class Status(StrEnum):
    """How one guarantee ended."""

    PASS = "pass"  # noqa: S105 - a verdict, not a password
    FAIL = "fail"
    NOT_APPLICABLE = "n/a"
    ERROR = "error"


LABELS: Final = {
    Status.PASS: "PASS",
    Status.FAIL: "FAIL",
    Status.NOT_APPLICABLE: "N/A",
    Status.ERROR: "ERROR",
}


@dataclass(frozen=True, slots=True)
class Result:
    """One guarantee's verdict: which action exercised it and what was shown (or why not)."""

    gid: str
    name: str
    status: Status
    action: str = ""
    detail: str = ""
    counterexample: Any = None
    seconds: float = 0.0

    def row(self, width: int) -> str:
        """``Gn  name  STATUS  action (detail)``."""
        what = f"{self.action} ({self.detail})" if self.action else f"({self.detail})"
        return f"{self.gid:<4}{self.name:<{width}}  {LABELS[self.status]:<5} {what}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready rendering (the counterexample only when there is one)."""
        out: dict[str, Any] = {
            "id": self.gid,
            "name": self.name,
            "status": str(self.status),
            "action": self.action,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }
        if self.counterexample is not None:
            out["counterexample"] = self.counterexample
        return out


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Every selected guarantee's result for one policy and one kind of scratch store."""

    policy: str
    policy_hash: str
    store: str
    results: tuple[Result, ...]
    warnings: tuple[str, ...] = field(default=())

    def count(self, status: Status) -> int:
        """How many guarantees ended with ``status``."""
        return sum(1 for r in self.results if r.status is status)

    @property
    def applicable(self) -> int:
        """The denominator: guarantees that passed or failed."""
        return self.count(Status.PASS) + self.count(Status.FAIL)

    @property
    def exit_code(self) -> int:
        """3 on verify's own error, 1 on a failure, 2 if nothing applied, else 0."""
        if self.count(Status.ERROR):
            return 3
        if self.count(Status.FAIL):
            return 1
        return 0 if self.count(Status.PASS) else 2

    def summary(self) -> str:
        """``N/M applicable guarantees pass``, then failures, N/As and errors by id."""
        text = f"{self.count(Status.PASS)}/{self.applicable} applicable guarantees pass"
        for status, label in ((Status.FAIL, "FAIL"), (Status.ERROR, "ERROR")):
            ids = [r.gid for r in self.results if r.status is status]
            if ids:
                text += f"; {len(ids)} {label} ({', '.join(ids)})"
        na = [r.gid for r in self.results if r.status is Status.NOT_APPLICABLE]
        if na:
            text += f"; {len(na)} not applicable ({', '.join(na)})"
        if not self.applicable:
            text += "; nothing applicable, nothing proven"
        return text

    def to_text(self) -> str:
        """One row per guarantee, warnings, then the summary line."""
        width = max((len(r.name) for r in self.results), default=0)
        head = f"{self.policy} ({self.policy_hash[:19]}…)"
        lines = [f"ctrlrun verify: {head} on a scratch {self.store} store"]
        lines += [r.row(width) for r in self.results]
        lines += [f"warning: {w}" for w in self.warnings]
        lines.append(self.summary())
        return "\n".join(lines)

    def to_json(self) -> str:
        """Schema ``ctrlrun.verify/v1``."""
        document = {
            "schema": REPORT_SCHEMA,
            "policy": self.policy,
            "policy_hash": self.policy_hash,
            "store": self.store,
            "exit_code": self.exit_code,
            "summary": self.summary(),
            "guarantees": [r.to_dict() for r in self.results],
            "warnings": list(self.warnings),
        }
        return json.dumps(document, indent=2, ensure_ascii=False, default=str)

    def to_junit(self) -> str:
        """JUnit XML: one testcase per guarantee; N/A is ``<skipped>``, never a pass."""
        suite = ET.Element(
            "testsuite",
            name="ctrlrun verify",
            tests=str(len(self.results)),
            failures=str(self.count(Status.FAIL)),
            errors=str(self.count(Status.ERROR)),
            skipped=str(self.count(Status.NOT_APPLICABLE)),
        )
        for r in self.results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname="ctrlrun.verify",
                name=f"{r.gid} {r.name}",
                time=f"{r.seconds:.3f}",
            )
            tag = {Status.FAIL: "failure", Status.ERROR: "error", Status.NOT_APPLICABLE: "skipped"}
            if r.status in tag:
                child = ET.SubElement(case, tag[r.status], message=r.detail)
                if r.counterexample is not None:
                    child.text = json.dumps(r.counterexample, indent=2, default=str)
            elif r.action:
                ET.SubElement(case, "system-out").text = f"{r.action}: {r.detail}"
        return ET.tostring(suite, encoding="unicode", xml_declaration=True)
