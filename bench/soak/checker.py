"""The history checker: the side journal (what the remote did) against the store (what it says).

Violations, each of which must be zero:
* ``double_executions`` — a key whose remote acted for two attempts, or twice for one;
* ``failed_but_acted`` — an attempt recorded FAILED (receipt or record) whose executor had
  journalled ``acting``;
* ``unexplained_ambiguous`` — an AMBIGUOUS receipt, record or lapsed lease whose attempt was
  dealt no fault that can make an outcome unknown, and whose action had no connection cut
  journalled (a lost COMMIT can leave a reservation unanswered, or an outcome unrecorded);
* ``missing_receipts`` — a call that finished in a live process with no receipt;
* ``duplicate_receipts`` — an action with more than one receipt (one call, one verdict: a
  second receipt means the store told two stories about it, e.g. an outcome that committed
  and was then recorded again as AMBIGUOUS);
* ``chain_breaks`` — the receipt chain does not verify.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from journal import read_journals

import ctrlrun
from ctrlrun.kernel.receipt import place

UNKNOWN_FAULTS = frozenset({"error", "hang", "kill_before", "kill_after"})
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
    cuts: dict[str, str] = {}  # action_id -> the connection cut journalled for it
    for entry in entries:
        findings.counts[f"journal:{entry['phase']}"] += 1
        if entry["phase"] == "start":
            starts[entry["token"]] = entry["fault"]
            findings.counts[f"fault:{entry['fault']}"] += 1
        elif entry["phase"] == "acting":
            acting[entry["key"]].append(entry["token"])
        elif entry["phase"] == "cut":
            cuts[entry["action_id"]] = entry["cut"]
            findings.counts[f"cut_armed:{entry['cut']}"] += 1
        elif entry["phase"] == "outcome":
            findings.counts[f"outcome:{entry['outcome'].split(':')[0]}"] += 1
            if entry.get("cut_fired"):
                findings.counts[f"cut_fired:{entry['cut']}"] += 1
    receipts = [r.document for r in store.receipts()]
    _check_doubles(findings, acting)
    _check_failed(findings, acting, receipts, store)
    _check_ambiguous(findings, starts, cuts, receipts, store)
    _check_receipts(findings, entries, receipts)
    report = store.verify_chain()
    findings.counts["receipts"] = report.total
    if not report.ok:
        findings.violations["chain_breaks"] += [  # kind@seq, kind@P:seq off partition 0
            f"{b.kind}@{place(b.partition, b.seq)}" for b in report.breaks
        ]
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
    findings: Findings,
    starts: dict[str, str],
    cuts: dict[str, str],
    receipts: list[dict[str, Any]],
    store: Any,
) -> None:
    seen: dict[tuple[str, int], set[str]] = defaultdict(set)  # (key, attempt) -> action ids
    for r in receipts:
        if r["result"] == "ambiguous":
            seen[(r["effect_key"], r["attempt"])].add(r["action_id"])
    for record in store.list_effects(ctrlrun.EffectState.AMBIGUOUS):
        seen[(record.effect_key, record.attempt)].add(record.action_id)
    for event in store.events():
        if event.type is ctrlrun.EventType.EFFECT_LEASE_EXPIRED:
            seen[(event.effect_key, event.data["attempt"])].add(event.action_id)
    for (key, attempt), action_ids in sorted(seen.items()):
        findings.counts["ambiguous_attempts"] += 1
        fault = starts.get(ctrlrun.idempotency_token_for(key, attempt))
        cut = next((cuts[a] for a in sorted(action_ids) if a in cuts), None)
        if fault in UNKNOWN_FAULTS:
            findings.counts[f"ambiguous_explained_by:{fault}"] += 1
        elif cut is not None:
            findings.counts[f"ambiguous_explained_by:cut_{cut}"] += 1
        else:
            findings.violations["unexplained_ambiguous"].append(f"{key} attempt {attempt}: {fault}")


def _check_receipts(
    findings: Findings, entries: list[dict[str, Any]], receipts: list[dict[str, Any]]
) -> None:
    per_action = Counter(r["action_id"] for r in receipts)
    for action_id, count in sorted(per_action.items()):
        if count > 1:
            findings.violations["duplicate_receipts"].append(f"{action_id}: {count} receipts")
    with_receipt = set(per_action)
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
        "duplicate_receipts",
        "chain_breaks",
    ):
        found = findings.violations.get(name, [])
        lines.append(f"  {name:36s} {len(found):8d}" + (f"   e.g. {found[:3]}" if found else ""))
    lines.append("result: " + ("OK" if findings.ok else "VIOLATIONS FOUND"))
    return "\n".join(lines)
