"""The protected call's two transactions, each in one round trip and one function call
(decisions 0006 and 0009).

The common case of each transaction is written here; everything else goes to the shared
``store/ops`` functions, which ask the planner:

* ``start``: the action's effect-key template checked (or recorded), the reservation of an
  absent key (a guarded ``INSERT … ON CONFLICT DO NOTHING``, stamped with the server's time)
  and the events, one call to ``ctrlrun_reserve_templated``, with ``BEGIN``
  and ``COMMIT`` in one message. A key that exists is answered with the record the function
  met, nothing written (the COMMIT ends an empty transaction; the engine raises
  ``GuardMissed`` with it); a template that differs raises CR001 and nothing commits. The
  store refuses from the record met when the planner refuses outright (``refusal_met``), and
  otherwise runs ``start_action_in_txn``, which reads the record and plans, in a new
  transaction. A start with an approval takes that shared path directly (the approval is
  read and checked first).
* ``finish``: the outcome (a guarded ``effect_move``), the events, the head lock, the receipt
  linked and hashed on the server and the head's advance, one call to ``ctrlrun_finish_effect``
  in one message, so the chain's head row is locked only while the server runs the tail of
  that call and flushes the COMMIT. CR001 sends the store to ``finish_action_in_txn`` in a new
  transaction. Without an outcome to record, and for ``record`` with a receipt, the events and
  the receipt are one call to ``ctrlrun_record_receipt``.

The events of a call travel as one jsonb array (``events_json``). Every folded write is
recorded in the witness under its own name (``PgTxn.fold_later``), so a lost COMMIT is
settled by re-reading as before; what only the server knew (its time, the receipt's seq) is
read back when needed.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from ctrlrun.canonical import canonical_text
from ctrlrun.errors import Refused, StoreError
from ctrlrun.kernel.effect import EffectState, Reservation, plan_reservation
from ctrlrun.kernel.event import EventDraft, EventType
from ctrlrun.kernel.evidence_text import event_data_json, result_json
from ctrlrun.kernel.partition import receipt_partition
from ctrlrun.kernel.receipt import ReceiptDraft, StoredReceipt, draft_in_partition
from ctrlrun.store.codec import effect_from_row
from ctrlrun.store.ops.actions import start_action_in_txn
from ctrlrun.store.protocol import FinishRequest, Started, StartRequest

__all__ = ["PendingReceipt", "PendingStart", "finish", "record", "refusal_met", "start"]

if TYPE_CHECKING:  # the driver is imported when a store is constructed, not before
    from ctrlrun.store.postgres.txn import PgTxn


_MICROSECOND: Final = timedelta(microseconds=1)


def start(txn: PgTxn, request: StartRequest) -> Started | PendingStart:
    """Transaction 1: folded unless an approval must be read and checked first (its own
    round trip), which the shared ``start_action_in_txn`` does."""
    if request.approval_id is not None:
        return start_action_in_txn(txn, request)
    txn.lean()
    if request.effect_key is None:
        return start_plain(txn, request)
    return start_effect(txn, request)


def start_effect(txn: PgTxn, request: StartRequest) -> PendingStart:
    """Transaction 1 for a call with an effect key and no approval: the guarded reservation
    and the events, all with the COMMIT (see the module)."""
    assert request.effect_key is not None
    state = EffectState.EXECUTING if request.execute else EffectState.RESERVED
    lease_us = request.lease // _MICROSECOND
    mark = f"ctrlrun-lease-{secrets.token_hex(16)}"
    reserved = EventDraft(
        EventType.EFFECT_RESERVED,
        request.action_id,
        request.effect_key,
        data={"attempt": 1, "lease_expires_at": mark},
    )
    drafts = [*request.events, reserved]
    mark_row = len(drafts)  # 1-based, as WITH ORDINALITY counts
    if request.execute:
        attempt = {"attempt": 1}
        drafts.append(
            EventDraft(
                EventType.EXECUTION_STARTED, request.action_id, request.effect_key, data=attempt
            )
        )
    reserve = "effect_reserve_folded"
    params = {
        "now": txn.now_param,
        "effect_key": request.effect_key,
        "state": str(state),
        "action_id": request.action_id,
        "lease_us": lease_us,
        "lease": request.lease,
        "lease_mark": mark,
        "mark_row": mark_row,
        "events": events_json(drafts),
        "action": request.action_name,
        "template": request.effect_template if request.action_name is not None else None,
    }
    txn.fold_later(reserve, ((reserve, "", params),), keep_as=reserve)
    return PendingStart(txn, request)


def refusal_met(detail: str | None, request: StartRequest) -> Refused | None:
    """The refusal of a folded reservation whose key exists, from the record the function met
    (its answer, ``met``: the row as committed and the instant it judged by), when the planner
    refuses and writes nothing; None sends the start to the shared path, which reads and
    plans anew (a lapsed lease to write AMBIGUOUS, a failed attempt to renew, no detail).
    One transaction for a duplicate instead of two."""
    assert request.effect_key is not None
    try:
        met = json.loads(detail or "null")
        if not isinstance(met, dict):
            return None
        record = effect_from_row({**met, "effect_key": request.effect_key}, _utc)
        now = _utc(met["now"])
    except (ValueError, KeyError, TypeError, StoreError):
        return None  # the shared path reads the record itself and reports what it finds
    plan = plan_reservation(
        record,
        effect_key=request.effect_key,
        action_id=request.action_id,
        lease=request.lease,
        now=now,
        max_attempts=request.max_attempts,
    )
    return None if plan.refusal is None or plan.ambiguate else plan.refusal


def _utc(text: Any) -> datetime:
    """An instant the server wrote as UTC wall time without an offset (or None)."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class PendingStart:
    """A reservation queued with the COMMIT: its time comes back with the COMMIT's answer."""

    txn: PgTxn
    request: StartRequest

    def started(self) -> Started | None:
        """What was granted, or None when the answer was lost (the re-read proved the
        transaction landed: read the record for its lease)."""
        rows = self.txn.returned.get("effect_reserve_folded")
        if not rows:
            return None
        return self.granted(self.txn.read_ts(rows[0]["now"]) + self.request.lease)

    def granted(self, lease_expires_at: datetime) -> Started:
        assert self.request.effect_key is not None
        key, action_id = self.request.effect_key, self.request.action_id
        return Started(Reservation(key, action_id, 1, lease_expires_at), None)


def start_plain(txn: PgTxn, request: StartRequest) -> Started:
    """Transaction 1 for a call with neither an effect key nor an approval: its events, with
    the COMMIT (one round trip)."""
    own: list[EventDraft] = []
    if request.execute:  # as start_action_in_txn writes it: no attempt without a key
        started = {"attempt": None}
        own.append(EventDraft(EventType.EXECUTION_STARTED, request.action_id, None, data=started))
    append_events(txn, (*request.events, *own))
    return Started(None, None)


def append_events(txn: PgTxn, drafts: Iterable[EventDraft]) -> None:
    """Queue ``drafts`` in order, stamped with the transaction's time: one call of
    ``ctrlrun_append_events`` (``events_append``), none when there are no events."""
    drafts = tuple(drafts)
    if drafts:
        txn.run_later("events_append", {"now": txn.now_param, "events": events_json(drafts)})


_EVENTS_JSON: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False
).encode


def events_json(drafts: Iterable[EventDraft]) -> str:
    """Events as the one jsonb array the schema's functions insert in order: a row
    ``[type, action_id, effect_key, approval_id, data_json]`` each, None as JSON null and
    data_json (JSON text, as the shared path stores it) as a JSON string, which the server
    reads back character for character (``->>``)."""
    return _EVENTS_JSON(
        [
            [str(d.type), d.action_id, d.effect_key, d.approval_id, event_data_json(d.data)]
            for d in drafts
        ]
    )


@dataclass(frozen=True, slots=True)
class PendingReceipt:
    """A receipt queued with the COMMIT: its row comes back with the COMMIT's answer."""

    txn: PgTxn
    receipt_id: str
    partition: int = 0

    def stored(self) -> StoredReceipt | None:
        """The receipt as the server linked it, or None when the answer was lost (the
        re-read proved the transaction landed: read the row by ``receipt_id``)."""
        rows = self.txn.returned.get(RECEIPT)
        if not rows:
            return None
        row = rows[0]
        return StoredReceipt(
            int(row["seq"]), self.receipt_id, row["document"], row["hash"], partition=self.partition
        )


RECEIPT: Final = "receipt_append_folded"
"""The witness's name for a chained receipt linked on the server, and where its row is kept."""


def finish(txn: PgTxn, request: FinishRequest) -> PendingReceipt:
    """Transaction 2 for any call: outcome (guarded), events, chained receipt — one statement
    queued for the COMMIT's message."""
    txn.lean()
    receipt, pending = receipt_write(txn, request.receipt)
    if request.effect_key is None or request.outcome is None:
        events = {"now": txn.now_param, "events": events_json(request.events)}
        txn.fold_later("receipt_record_folded", (("events", "", events), receipt), keep_as=RECEIPT)
        return pending
    move = {
        "now": txn.now_param,
        "effect_key": request.effect_key,
        "state": str(request.outcome),
        "lease_expires_at": None,
        "result_json": result_json(request.result),
        "error": request.error,
        "resolved_by": None,
        "from_state": str(EffectState.EXECUTING),
        "action_id": request.action_id,
        "attempt": request.attempt or 0,
        "events": events_json(request.events),
    }
    txn.fold_later(
        "effect_finish_folded", (("effect_move_folded", "", move), receipt), keep_as=RECEIPT
    )
    return pending


def record(
    txn: PgTxn, events: tuple[EventDraft, ...], receipt: Mapping[str, Any] | None
) -> PendingReceipt | None:
    """``record_in_txn``, folded: events and, optionally, a receipt, with the COMMIT."""
    txn.lean()
    if receipt is None:
        append_events(txn, events)
        return None
    write, pending = receipt_write(txn, receipt)
    own = {"now": txn.now_param, "events": events_json(events)}
    txn.fold_later("receipt_record_folded", (("events", "", own), write), keep_as=RECEIPT)
    return pending


def receipt_write(
    txn: PgTxn, draft: Mapping[str, Any]
) -> tuple[tuple[str, str, dict[str, Any]], PendingReceipt]:
    """The chained receipt as a write for ``PgTxn.fold_later`` (prefix ``r_``), linked on the
    server: the head locked, the receipt inserted linked to it, the head advanced (the
    schema's functions, last in their transaction).

    The document is rendered here, canonical, with two random marks: a 41-digit number where
    ``seq`` goes and a string where ``prev_hash`` goes (replaced inside its quotes); the
    server replaces both from the locked head and hashes the result. A number in seq's place
    keeps the template canonical as it is, so a ``ReceiptDraft`` renders it from its
    prepared parts (``linked_text``, the bytes ``chain_receipt`` stores) instead of encoding
    the whole document.

    The receipt goes into the chain its effect key picks (its action id without one:
    ``kernel.partition``), so every retry of one effect reads in one chain; a receipt in a
    partition other than 0 states it in its hashed document.
    """
    partition = receipt_partition(draft.get("effect_key"), str(draft["action_id"]), txn.partitions)
    draft = draft_in_partition(draft, partition)
    nonce = secrets.token_hex(16)
    seq_mark, prev_mark = _SEQ_MARK_BASE + int(nonce, 16), f"ctrlrun-prev-{nonce}"
    receipt_id = str(draft["receipt_id"])
    params = {
        "now": txn.now_param,
        "receipt_id": receipt_id,
        "action_id": draft["action_id"],
        "effect_key": draft.get("effect_key"),
        "result": draft["result"],
        "template": _template(draft, seq_mark, prev_mark),
        "seq_mark": str(seq_mark),
        "prev_mark": prev_mark,
        "partition": partition,
    }
    return (RECEIPT, "r_", params), PendingReceipt(txn, receipt_id, partition)


_SEQ_MARK_BASE: Final = 10**40
"""Added to 128 random bits: every seq mark has 41 digits, none of them a real seq."""


def _template(draft: Mapping[str, Any], seq_mark: int, prev_mark: str) -> str:
    """The canonical text of ``draft`` with ``seq_mark`` and ``prev_mark`` linked in: from a
    ``ReceiptDraft``'s prepared parts when it has them and they encode (a lone surrogate
    takes the validating path, which names it), else by encoding the whole document."""
    if isinstance(draft, ReceiptDraft):
        text = draft.linked_text(seq_mark, prev_mark)
        if text is not None and (text.isascii() or _encodes(text)):
            return text
    return canonical_text({**draft, "seq": seq_mark, "prev_hash": prev_mark})


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
