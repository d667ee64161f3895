"""The history checker: the side journal (what the remote did) against the store (what it says).

Violations, each of which must be zero:
* ``double_executions`` — a key whose remote acted for two attempts, or twice for one;
* ``failed_but_acted`` — an attempt recorded FAILED (receipt or record) whose executor had
  journalled ``acting``;
* ``unexplained_ambiguous`` — an AMBIGUOUS receipt or record whose attempt was dealt no fault
  that can make an outcome unknown;
* ``missing_receipts`` — a call that finished in a live process with no receipt;
* ``chain_breaks`` — the receipt chain does not verify.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from journal import read_journals

import ctrlrun

UNKNOWN_FAULTS = frozenset({"error", "hang", "kill_before", "kill_after", "store_cut"})
MAX_ATTEMPTS_SCANNED = 200


@dataclass
class Findings:
    counts: Counter[str] = field(default_factory=Counter)
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def _attempt_of(key: str, token: str, limit: int) -> int | None:
    for attempt in range(1, limit + 1):
        if ctrlrun.idempotency_token_for(key, attempt) == token:
            return attempt
    return None


def check(directory: Path, store: Any) -> Findings:
    """Compare every journal in ``directory`` with ``store``."""
    findings = Findings()
    entries = list(read_journals(directory))
    starts: dict[str, str] = {}  # token -> fault dealt
    acting: dict[str, list[str]] = defaultdict(list)  # key -> tokens that acted
    for entry in entries:
        findings.counts[f"journal:{entry['phase']}"] += 1
        if entry["phase"] == "start":
            starts[entry["token"]] = entry["fault"]
            findings.counts[f"fault:{entry['fault']}"] += 1
        elif entry["phase"] == "acting":
            acting[entry["key"]].append(entry["token"])
        elif entry["phase"] == "outcome":
            findings.counts[f"outcome:{entry['outcome'].split(':')[0]}"] += 1
    receipts = [r.document for r in store.receipts()]
    _check_doubles(findings, acting)
    _check_failed(findings, acting, receipts, store)
    _check_ambiguous(findings, starts, receipts, store)
    _check_receipts(findings, entries, receipts)
    report = store.verify_chain()
    findings.counts["receipts"] = report.total
    if not report.ok:
        findings.violations["chain_breaks"] += [f"{b.kind}@{b.seq}" for b in report.breaks]
    return findings


def _check_doubles(findings: Findings, acting: dict[str, list[str]]) -> None:
    for key, tokens in acting.items():
        findings.counts["keys_acted"] += 1
        if len(tokens) > 1:
            findings.violations["double_executions"].append(f"{key}: {len(tokens)} actions")


def _check_failed(
    findings: Findings, acting: dict[str, list[str]], receipts: list[dict[str, Any]], store: Any
) -> None:
    failed = {(r["effect_key"], r["attempt"]) for r in receipts if r["result"] == "failed"}
    for key, tokens in acting.items():
        record = store.get_effect(key)
        limit = max(record.attempt if record else 1, 1) + 1
        for token in tokens:
            attempt = _attempt_of(key, token, min(limit, MAX_ATTEMPTS_SCANNED))
            if (key, attempt) in failed:
                findings.violations["failed_but_acted"].append(f"{key} attempt {attempt}: receipt")
            if record and record.attempt == attempt and record.state is ctrlrun.EffectState.FAILED:
                findings.violations["failed_but_acted"].append(f"{key} attempt {attempt}: record")


def _check_ambiguous(
    findings: Findings, starts: dict[str, str], receipts: list[dict[str, Any]], store: Any
) -> None:
    seen = {(r["effect_key"], r["attempt"]) for r in receipts if r["result"] == "ambiguous"}
    seen |= {(r.effect_key, r.attempt) for r in store.list_effects(ctrlrun.EffectState.AMBIGUOUS)}
    seen |= {
        (e.effect_key, e.data["attempt"])
        for e in store.events()
        if e.type is ctrlrun.EventType.EFFECT_LEASE_EXPIRED
    }
    for key, attempt in sorted(seen):
        findings.counts["ambiguous_attempts"] += 1
        fault = starts.get(ctrlrun.idempotency_token_for(key, attempt))
        if fault in UNKNOWN_FAULTS:
            findings.counts[f"ambiguous_explained_by:{fault}"] += 1
        else:
            findings.violations["unexplained_ambiguous"].append(f"{key} attempt {attempt}: {fault}")


def _check_receipts(
    findings: Findings, entries: list[dict[str, Any]], receipts: list[dict[str, Any]]
) -> None:
    with_receipt = {r["action_id"] for r in receipts}
    for entry in entries:
        if entry["phase"] != "outcome" or entry["outcome"].startswith("store_error"):
            continue
        if entry["action_id"] not in with_receipt:
            findings.violations["missing_receipts"].append(entry["action_id"])


def render(findings: Findings) -> str:
    lines = ["counts"]
    lines += [f"  {name:36s} {value:8d}" for name, value in sorted(findings.counts.items())]
    lines.append("violations (each must be 0)")
    for name in (
        "double_executions",
        "failed_but_acted",
        "unexplained_ambiguous",
        "missing_receipts",
        "chain_breaks",
    ):
        found = findings.violations.get(name, [])
        lines.append(f"  {name:36s} {len(found):8d}" + (f"   e.g. {found[:3]}" if found else ""))
    lines.append("result: " + ("OK" if findings.ok else "VIOLATIONS FOUND"))
    return "\n".join(lines)
