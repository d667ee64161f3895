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

Folded writes (decision 0006) travel with their COMMIT, so some values are known only to the
server when the answer is lost: the transaction's time (``now`` is None: the server's
``now()``), a receipt's seq and its predecessor's hash. Each judge compares every value the
client bound and checks the rest for what they must be: the time stamped on a moved effect is
whatever the server's clock said (the write token, a secret of this transaction, already
proves authorship); a receipt is ours when its document is exactly our rendered text with its
own seq and a prev_hash filled in and its hash is that text's SHA-256.
This module is pure: no driver, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from ctrlrun.canonical import sha256_hex
from ctrlrun.errors import (
    AmbiguityReason,
    AmbiguousWrite,
    ApprovalMismatch,
    CtrlrunError,
    InProgress,
    MismatchReason,
    WriteFailed,
)
from ctrlrun.kernel.approval import plan_answer
from ctrlrun.kernel.effect import EffectState, plan_reservation, plan_transition
from ctrlrun.store.codec import approval_from_row, effect_from_row

Params = Mapping[str, Any]
Row = Mapping[str, Any]

GUARD_SQLSTATE: Final = "CR001"
"""Raised by the schema's functions when a folded conditional write matched no row."""


class GuardMissed(WriteFailed):
    """A folded conditional write matched no row (``CR001``, or a reservation's answer with
    the record it met): nothing committed, and the store refuses from that record or decides
    again on the shared path in a new transaction. The Postgres store's own signal, caught
    where it folds; were one ever to escape, it is still a ``WriteFailed``."""

    def __init__(self, message: str, *, operation: str = "", detail: str | None = None) -> None:
        super().__init__(message, sqlstate=GUARD_SQLSTATE, operation=operation)
        self.detail = detail or None  # what the function met, when it says (JSON)


EFFECT_WRITES: Final = frozenset(
    {"effect_insert", "effect_renew", "effect_move", "effect_reserve_folded", "effect_move_folded"}
)
DEFERRABLE: Final = frozenset({"effect_reserve_folded", "effect_move_folded"})
"""Effect writes that may travel with the COMMIT: they raise (CR001) when they match no row."""
APPROVAL_WRITES: Final = frozenset(
    {"approval_insert", "approval_answer", "approval_consume", "approval_set_status"}
)
RECEIPT_WRITES: Final = frozenset({"receipt_insert", "receipt_append_folded"})
DOCUMENT_WRITES: Final = frozenset({"document_insert", "document_update"})
OUTBOX_WRITES: Final = frozenset({"outbox_settle"})
INSERTS: Final = frozenset(
    {
        "effect_insert",
        "effect_reserve_folded",
        "approval_insert",
        "receipt_insert",
        "receipt_append_folded",
        "document_insert",
    }
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


def _effect_reserved_folded(p: Params, row: Row | None) -> bool:
    """Attempt 1 as this transaction inserted it: every bound column, the token, one instant
    for created_at and updated_at (the given clock's, if any) and the lease after it."""
    if not _same(p, row, ("effect_key", "state", "action_id", "write_token")) or row is None:
        return False
    stamped = row["created_at"] == row["updated_at"] and (p["now"] in (None, row["created_at"]))
    leased = row["lease_expires_at"] == row["created_at"] + p["lease"]
    return row["attempt"] == 1 and stamped and leased and _cleared(row, _EFFECT_CLEARED)


def _effect_moved_folded(p: Params, row: Row | None) -> bool:
    columns = ("state", "action_id", "attempt", "lease_expires_at", "result_json", "error")
    stamped = p["now"] is None or (row or {}).get("updated_at") == p["now"]
    resolver_kept = p["resolved_by"] is None or (row or {}).get("resolved_by") == p["resolved_by"]
    return _same(p, row, (*columns, "write_token")) and stamped and resolver_kept


def _receipt_appended(p: Params, row: Row | None) -> bool:
    """Our rendered text with the row's own seq and its stored prev_hash filled in, and the
    hash that text's SHA-256 (the receipt_id, fresh per draft, names the row)."""
    if row is None or row["seq"] is None:
        return False
    text = str(row["document"])
    try:
        prev = json.loads(text).get("prev_hash")
    except (ValueError, AttributeError):
        return False
    if not isinstance(prev, str):
        return False
    expected = str(p["template"]).replace(str(p["seq_mark"]), str(row["seq"]))
    expected = expected.replace(str(p["prev_mark"]), prev)
    return text == expected and row["hash"] == sha256_hex(text.encode("utf-8"))


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
    "receipt_append_folded": _receipt_appended,
    "effect_move_folded": _effect_moved_folded,
    "effect_reserve_folded": _effect_reserved_folded,
    "document_insert": lambda p, row: (
        _document_saved(p, row, 1) and (row or {}).get("kind") == p["kind"]
    ),
    "document_update": lambda p, row: _document_saved(p, row, int(p["version"])),
    "outbox_settle": _outbox_settled,
}

# --- "before": the row as the write found it ----------------------------------------------


def _effect_unmoved(p: Params, row: Row | None) -> bool:
    return (
        row is not None
        and row["state"] == p["from_state"]
        and row["action_id"] == p["action_id"]
        and row["attempt"] == p["attempt"]
    )


_UNCHANGED: Final[dict[str, Callable[[Params, Row | None], bool]]] = {
    "effect_insert": lambda p, row: row is None,
    "effect_reserve_folded": lambda p, row: row is None,
    "effect_renew": lambda p, row: (
        row is not None and row["state"] == "failed" and row["attempt"] == p["from_attempt"]
    ),
    "effect_move": _effect_unmoved,
    "effect_move_folded": _effect_unmoved,
    "approval_insert": lambda p, row: row is None,
    "approval_answer": lambda p, row: row is not None and row["status"] == "pending",
    "approval_consume": lambda p, row: row is not None and row["status"] == "granted",
    "approval_set_status": lambda p, row: row is not None and row["status"] == p["from_status"],
    "receipt_insert": lambda p, row: row is None,
    "receipt_append_folded": lambda p, row: row is None,
    "document_insert": lambda p, row: row is None,
    # versions only grow: still at the base version means no save landed since, ours included
    "document_update": lambda p, row: row is not None and row["version"] == p["expected_version"],
    # still claimed by this claim: nobody (neither we nor a reclaim) has settled it
    "outbox_settle": lambda p, row: (
        row is not None and row["status"] == "processing" and row["attempts"] == p["attempts"]
    ),
}


# --- "something else": the planner's refusal -----------------------------------------------


def _not_ours(key: str) -> GuardMissed:
    return GuardMissed(
        f"effect {key!r}: the folded reservation met a record it did not write; the planner"
        " decides in a new transaction",
        operation="start_action",
    )


def refusal(evidence: Evidence, row: Row | None, now: datetime, read_ts: Any) -> CtrlrunError:
    """What to raise when the re-read found neither our row nor the row as it was before.

    The effect's own planner decides (a reservation: ``plan_reservation``; a transition:
    ``plan_transition``); if it would let the write proceed, the answer is still a refusal
    (``InProgress``): recovery re-issues only what it proved did not land.
    One exception: a folded reservation only ever inserts attempt 1 on an absent key, so a
    record the planner would renew (FAILED) holds no live attempt of ours — if ours landed, it
    was moved on and never executed. That answer is ``GuardMissed``, as if the guard
    had fired: the store asks the planner again in a new transaction.
    """
    write = evidence.first
    p = write.params
    if evidence.kind == "effect":
        record = None if row is None else effect_from_row(row, read_ts)
        key = str(p["effect_key"])
        if write.query in {"effect_move", "effect_move_folded"}:
            found = plan_transition(
                record,
                effect_key=key,
                action_id=str(p["action_id"]),
                attempt=int(p["attempt"]),
                expected=frozenset({EffectState(p["from_state"])}),
                now=now,
            )
        else:
            lease = p["lease"] if "lease" in p else p["lease_expires_at"] - p["updated_at"]
            plan = plan_reservation(
                record, effect_key=key, action_id=str(p["action_id"]), lease=lease, now=now
            )
            found = plan.refusal
            if found is None and write.query == "effect_reserve_folded":
                return _not_ours(key)
        return found or InProgress(
            f"effect {key!r} changed under a concurrent writer while a COMMIT went unanswered",
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
