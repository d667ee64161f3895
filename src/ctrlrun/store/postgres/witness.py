"""What a write transaction left behind, and how a re-read recognises it after a lost COMMIT.

A Postgres transaction is atomic, so one row it wrote settles the whole of it. ``PgTxn`` records
every write a re-read can recognise (``Witness.saw``); after a COMMIT whose answer never came,
``Witness.evidence`` picks the row to re-read — the effect record if the transaction wrote
one, else the approval, else the document (its create or its compare-and-swap), else the
outbox message (its fenced settle), else the receipt (a plan step's, too) — and ``judge``
compares what the re-read found with what was written, column for column:

* the row is exactly as this transaction left it → ``LANDED`` (``A1_OURS`` / ``A2_LANDED``);
* the row is as it was before (absent, for an insert) → ``NOT_LANDED``: the same transaction
  may be issued once more (``A1_REINSERT`` / ``A2_REISSUE``);
* anything else → ``OTHER`` (``A1_REFUSE`` / ``A2_REFUSE``): ``refusal`` asks the same planner
  the write obeyed, and a plan that would grant is refused as in progress, never retried.

A row can move on after our COMMIT landed and before the re-read (an outcome written FAILED
is renewed by a rival, an AMBIGUOUS one resolved). So a transaction that also wrote a receipt
carries it as ``corroboration``: a receipt row is never changed once written, and if it is
exactly ours the transaction committed (``LANDED``), whatever became of the effect row.

An effect row is ours only if it carries this transaction's random ``write_token`` as well as
every column we wrote: the action_id alone proves nothing, since two attempts can share one.
This module is pure: no driver, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from ctrlrun.errors import (
    AmbiguityReason,
    AmbiguousWrite,
    ApprovalMismatch,
    CtrlrunError,
    DuplicateEffect,
    DuplicateState,
    MismatchReason,
)
from ctrlrun.kernel.approval import plan_answer
from ctrlrun.kernel.effect import EffectState, plan_reservation, plan_transition
from ctrlrun.store.codec import approval_from_row, effect_from_row

Params = Mapping[str, Any]
Row = Mapping[str, Any]

EFFECT_WRITES: Final = frozenset({"effect_insert", "effect_renew", "effect_move"})
APPROVAL_WRITES: Final = frozenset(
    {"approval_insert", "approval_answer", "approval_consume", "approval_set_status"}
)
RECEIPT_WRITES: Final = frozenset({"receipt_insert"})
DOCUMENT_WRITES: Final = frozenset({"document_insert", "document_update"})
OUTBOX_WRITES: Final = frozenset({"outbox_settle"})
INSERTS: Final = frozenset(
    {"effect_insert", "approval_insert", "receipt_insert", "document_insert"}
)


class Verdict(StrEnum):
    """What a re-read found, relative to the write."""

    LANDED = "landed"
    NOT_LANDED = "not_landed"
    OTHER = "other"


BRANCHES: Final = {
    ("A1", Verdict.LANDED): "A1_OURS",
    ("A1", Verdict.NOT_LANDED): "A1_REINSERT",
    ("A1", Verdict.OTHER): "A1_REFUSE",
    ("A2", Verdict.LANDED): "A2_LANDED",
    ("A2", Verdict.NOT_LANDED): "A2_REISSUE",
    ("A2", Verdict.OTHER): "A2_REFUSE",
}


@dataclass(frozen=True, slots=True)
class Write:
    """One recognisable write: the named query and the parameters exactly as bound."""

    query: str
    params: Params


@dataclass(frozen=True, slots=True)
class Evidence:
    """The row that settles a transaction: how to re-read it and what it must look like.

    ``first`` is the transaction's first write to that row (its pre-state is "before") and
    ``last`` its last (its post-state is "ours"). ``family`` is ``A1`` when the first write
    was an insert, ``A2`` when it was a compare-and-set update.
    """

    kind: str  # "effect" | "approval" | "receipt"
    read_query: str
    read_params: Params
    first: Write
    last: Write
    corroboration: Evidence | None = None  # the receipt the same transaction wrote, if any

    @property
    def family(self) -> str:
        return "A1" if self.first.query in INSERTS else "A2"

    @property
    def effect_key(self) -> str | None:
        key = self.first.params.get("effect_key")
        return key if isinstance(key, str) else None

    def judge(self, row: Row | None) -> Verdict:
        """Compare the re-read ``row`` with what was written (see the module docstring)."""
        if _LANDED[self.last.query](self.last.params, row):
            return Verdict.LANDED
        if _UNCHANGED[self.first.query](self.first.params, row):
            return Verdict.NOT_LANDED
        return Verdict.OTHER

    def branch(self, verdict: Verdict) -> str:
        """The branch name logged for ``verdict``."""
        return BRANCHES[(self.family, verdict)]


class Witness:
    """The recognisable writes of one transaction, in order."""

    __slots__ = ("writes",)

    def __init__(self) -> None:
        self.writes: list[Write] = []

    def saw(self, query: str, params: Params, rowcount: int) -> None:
        """Record ``query`` if it is recognisable and changed exactly one row."""
        if rowcount == 1 and query in _LANDED:
            self.writes.append(Write(query, dict(params)))

    def evidence(self) -> Evidence | None:
        """The row that settles this transaction, or None if it wrote none. Its first and
        last writes are both to that one row (a claim that reclaimed several messages is
        settled by the first of them)."""
        found = [self._of(*entry) for entry in _PRIORITY]
        chosen = next((e for e in found if e is not None), None)
        receipt = found[-1]
        if chosen is None or receipt is None or chosen is receipt:
            return chosen
        return replace(chosen, corroboration=receipt)

    def _of(self, kind: str, queries: frozenset[str], read_query: str, key: str) -> Evidence | None:
        writes = [w for w in self.writes if w.query in queries]
        if not writes:
            return None
        first = writes[0]
        same_row = [w for w in writes if w.params[key] == first.params[key]]
        return Evidence(kind, read_query, {key: first.params[key]}, first, same_row[-1])


_PRIORITY: Final = (
    ("effect", EFFECT_WRITES, "effect_get", "effect_key"),
    ("approval", APPROVAL_WRITES, "approval_get", "approval_id"),
    ("document", DOCUMENT_WRITES, "document_get", "doc_id"),
    ("outbox", OUTBOX_WRITES, "outbox_get", "message_id"),
    ("receipt", RECEIPT_WRITES, "receipt_get", "receipt_id"),
)


# --- "ours": the row exactly as the write left it ------------------------------------------


def _same(params: Params, row: Row | None, columns: tuple[str, ...]) -> bool:
    return row is not None and all(row[c] == params[c] for c in columns)


def _cleared(row: Row | None, columns: tuple[str, ...]) -> bool:
    return row is not None and all(row[c] is None for c in columns)


_EFFECT_WRITTEN: Final = ("state", "action_id", "attempt", "updated_at", "lease_expires_at")
_EFFECT_CLEARED: Final = ("result_json", "error", "resolved_by")


def _effect_inserted(p: Params, row: Row | None) -> bool:
    columns = ("effect_key", "created_at", *_EFFECT_WRITTEN, "write_token")
    return _same(p, row, columns) and _cleared(row, _EFFECT_CLEARED)


def _effect_renewed(p: Params, row: Row | None) -> bool:
    return _same(p, row, (*_EFFECT_WRITTEN, "write_token")) and _cleared(row, _EFFECT_CLEARED)


def _effect_moved(p: Params, row: Row | None) -> bool:
    columns = (*_EFFECT_WRITTEN, "result_json", "error", "write_token")
    resolver_kept = p["resolved_by"] is None or (row or {}).get("resolved_by") == p["resolved_by"]
    return _same(p, row, columns) and resolver_kept


def _document_saved(p: Params, row: Row | None, version: int) -> bool:
    """The document as this save left it: the version, the content's digest, the writer and
    the transaction's own instant (``saved_at``)."""
    return (
        row is not None
        and row["version"] == version
        and row["content_hash"] == p["content_hash"]
        and row["updated_by"] == p["writer"]
        and row["updated_at"] == p["saved_at"]
    )


def _outbox_settled(p: Params, row: Row | None) -> bool:
    """The message as this claim's settle left it: still this claim's attempts, the settled
    status and error, the lease cleared (only ``outbox_resolve`` moves it on from there)."""
    return (
        row is not None
        and row["status"] == p["status"]
        and row["attempts"] == p["attempts"]
        and row["last_error"] == p["error"]
        and row["lease_expires_at"] is None
    )


_LANDED: Final[dict[str, Callable[[Params, Row | None], bool]]] = {
    "effect_insert": _effect_inserted,
    "effect_renew": _effect_renewed,
    "effect_move": _effect_moved,
    "approval_insert": lambda p, row: _same(
        p, row, ("action_hash", "action_json", "policy_hash", "created_at", "expires_at")
    ),
    "approval_answer": lambda p, row: _same(p, row, ("status", "approver", "answered_at")),
    "approval_consume": lambda p, row: (
        _same(p, row, ("consumed_at", "consumed_by")) and (row or {}).get("status") == "consumed"
    ),
    "approval_set_status": lambda p, row: _same(p, row, ("status",)),
    "receipt_insert": lambda p, row: _same(p, row, ("seq", "document", "hash")),
    "document_insert": lambda p, row: (
        _document_saved(p, row, 1) and (row or {}).get("kind") == p["kind"]
    ),
    "document_update": lambda p, row: _document_saved(p, row, int(p["version"])),
    "outbox_settle": _outbox_settled,
}

# --- "before": the row as the write found it ----------------------------------------------

_UNCHANGED: Final[dict[str, Callable[[Params, Row | None], bool]]] = {
    "effect_insert": lambda p, row: row is None,
    "effect_renew": lambda p, row: (
        row is not None and row["state"] == "failed" and row["attempt"] == p["from_attempt"]
    ),
    "effect_move": lambda p, row: (
        row is not None
        and row["state"] == p["from_state"]
        and row["action_id"] == p["action_id"]
        and row["attempt"] == p["attempt"]
    ),
    "approval_insert": lambda p, row: row is None,
    "approval_answer": lambda p, row: row is not None and row["status"] == "pending",
    "approval_consume": lambda p, row: row is not None and row["status"] == "granted",
    "approval_set_status": lambda p, row: row is not None and row["status"] == p["from_status"],
    "receipt_insert": lambda p, row: row is None,
    "document_insert": lambda p, row: row is None,
    # versions only grow: still at the base version means no save landed since, ours included
    "document_update": lambda p, row: row is not None and row["version"] == p["expected_version"],
    # still claimed by this claim: nobody (neither we nor a reclaim) has settled it
    "outbox_settle": lambda p, row: (
        row is not None and row["status"] == "processing" and row["attempts"] == p["attempts"]
    ),
}


# --- "something else": the planner's refusal -----------------------------------------------


def refusal(evidence: Evidence, row: Row | None, now: datetime, read_ts: Any) -> CtrlrunError:
    """What to raise when the re-read found neither our row nor the row as it was before.

    The effect's own planner decides (a reservation: ``plan_reservation``; a transition:
    ``plan_transition``); if it would let the write proceed, the answer is still a refusal
    (``DuplicateEffect(in_progress)``): recovery re-issues only what it proved did not land.
    """
    write = evidence.first
    p = write.params
    if evidence.kind == "effect":
        record = None if row is None else effect_from_row(row, read_ts)
        key = str(p["effect_key"])
        if write.query == "effect_move":
            found = plan_transition(
                record,
                effect_key=key,
                action_id=str(p["action_id"]),
                attempt=int(p["attempt"]),
                expected=frozenset({EffectState(p["from_state"])}),
                now=now,
            )
        else:
            lease = p["lease_expires_at"] - p["updated_at"]
            plan = plan_reservation(
                record, effect_key=key, action_id=str(p["action_id"]), lease=lease, now=now
            )
            found = plan.refusal
        return found or DuplicateEffect(
            f"effect {key!r} changed under a concurrent writer while a COMMIT went unanswered",
            state=DuplicateState.IN_PROGRESS,
            effect_key=key,
        )
    if write.query in {"approval_answer", "approval_consume"}:
        approval_id = str(p["approval_id"])
        record_a = None if row is None else approval_from_row(row, read_ts)
        if write.query == "approval_answer":
            answer = plan_answer(record_a, approval_id=approval_id, now=now).refusal
            if answer is not None:
                return answer
        reason = (
            MismatchReason.ANSWERED if write.query == "approval_answer" else MismatchReason.CONSUMED
        )
        return ApprovalMismatch(
            f"approval {approval_id} changed under a concurrent writer",
            reason=reason,
            approval_id=approval_id,
        )
    # A document or message that moved on, or a receipt not ours: ours may have landed and
    # been overtaken, or never landed. Only unknown is true.
    return AmbiguousWrite(
        f"the re-read found a {evidence.kind} row that is neither this write's nor the one it"
        " replaced",
        reason=AmbiguityReason.UNRECOGNISED,
        effect_key=evidence.effect_key,
    )
