"""Deliberately broken stores: wrappers around a real SQLite store, each subverting exactly
one behaviour of the store contract. ``support.broken_backends`` pins each to the conformance
case and reason that must catch it."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ctrlrun._time import utc_now
from ctrlrun.errors import (
    ApprovalMismatch,
    DuplicateEffect,
    DuplicateState,
    MismatchReason,
    NotExecuted,
    Refused,
)
from ctrlrun.kernel.approval import ApprovalStatus
from ctrlrun.kernel.effect import LIVE_STATES, EffectRecord, EffectState, Reservation
from ctrlrun.kernel.evidence_text import result_json
from ctrlrun.kernel.receipt import StoredReceipt
from ctrlrun.store.ops.approvals import check_consumable_in_txn, consume_approval_in_txn
from ctrlrun.store.ops.effects import finish_effect_in_txn
from ctrlrun.store.protocol import FinishRequest, Started


class Delegate:
    """Everything not overridden goes to the real store."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def now(self) -> Any:
        return self.inner.read(lambda txn: txn.now)

    def force(self, record: EffectRecord, state: EffectState, resolver: str | None = None) -> None:
        """Move ``record`` to ``state`` with the store's own conditional update."""
        self.inner.transact(
            lambda txn: txn.run(
                "effect_move",
                {
                    "effect_key": record.effect_key,
                    "state": str(state),
                    "updated_at": txn.ts(txn.now),
                    "lease_expires_at": None,
                    "result_json": result_json(record.result),
                    "error": record.error,
                    "resolved_by": resolver,
                    "committed_receipt_id": None,
                    "from_state": str(record.state),
                    "action_id": record.action_id,
                    "attempt": record.attempt,
                },
            )
        )


# --- reservation -------------------------------------------------------------------------


class TwoWinners(Delegate):
    """A contender refused as in progress is told it won anyway."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except DuplicateEffect:
            record = self.inner.get_effect(request.effect_key)
            attempt = record.attempt if record else 1
            expiry = utc_now() + request.lease
            return Started(
                Reservation(request.effect_key, request.action_id, attempt, expiry), None
            )


class RefusesWithTheWrongError(Delegate):
    """The right refusals, raised as RuntimeError."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except Refused as exc:
            raise RuntimeError(str(exc)) from exc


class ReleasesAnExpiredLease(Delegate):
    """A lapsed lease is treated as a failure, so a contender renews the key."""

    def start_action(self, request):
        record = self.inner.get_effect(request.effect_key) if request.effect_key else None
        if record is not None and record.state in LIVE_STATES and record.lease_expired(self.now()):
            self.force(record, EffectState.FAILED)
        return self.inner.start_action(request)


class SweepsOnRead(Delegate):
    """Reading a lapsed record marks it AMBIGUOUS."""

    def get_effect(self, key):
        record = self.inner.get_effect(key)
        if record is not None and record.lease_expired(self.now()):
            self.force(record, EffectState.AMBIGUOUS)
        return self.inner.get_effect(key)


# --- approvals ---------------------------------------------------------------------------


class ConsumesBeforeReserving(Delegate):
    """Consumes the approval in one transaction, then reserves in another."""

    def start_action(self, request):
        if request.approval_id is None:
            return self.inner.start_action(request)

        def consume(txn):
            check_consumable_in_txn(
                txn, approval_id=request.approval_id, action_hash=request.action_hash or ""
            )
            consume_approval_in_txn(
                txn,
                approval_id=request.approval_id,
                action_id=request.action_id,
                action_hash=request.action_hash or "",
            )

        self.inner.transact(consume)
        return self.inner.start_action(replace(request, approval_id=None, action_hash=None))


class ChecksTheDuplicateFirst(Delegate):
    """A committed key is refused before the presented approval is looked at."""

    def start_action(self, request):
        record = self.inner.get_effect(request.effect_key) if request.effect_key else None
        if request.approval_id and record is not None and record.state is EffectState.COMMITTED:
            raise DuplicateEffect(
                "already committed", state=DuplicateState.COMMITTED, effect_key=record.effect_key
            )
        return self.inner.start_action(request)


class ConsumesTwice(Delegate):
    """A consumed approval is waved through."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except ApprovalMismatch as exc:
            if exc.reason != MismatchReason.CONSUMED:
                raise
            return self.inner.start_action(replace(request, approval_id=None, action_hash=None))


class IgnoresTheActionHash(Delegate):
    """Any action may spend an approval."""

    def start_action(self, request):
        if request.approval_id:
            record = self.inner.get_approval(request.approval_id)
            if record is not None:
                request = replace(request, action_hash=record.action_hash)
        return self.inner.start_action(request)


class IgnoresExpiry(Delegate):
    """A granted approval is consumed however long ago it expired."""

    def start_action(self, request):
        record = self.inner.get_approval(request.approval_id) if request.approval_id else None
        granted = record is not None and record.status is ApprovalStatus.GRANTED
        if granted and record.is_expired(self.now()):
            self.inner.transact(
                lambda txn: consume_approval_in_txn(
                    txn,
                    approval_id=record.approval_id,
                    action_id=request.action_id,
                    action_hash=record.action_hash,
                )
            )
            request = replace(request, approval_id=None, action_hash=None)
        return self.inner.start_action(request)


class UpsertsAnApprovalRequest(Delegate):
    """Recording a request under an existing id resets it to pending."""

    def put_approval_request(self, draft, events=()):
        record = self.inner.get_approval(draft.approval_id)
        if record is None:
            return self.inner.put_approval_request(draft, events)
        self.inner.transact(
            lambda txn: txn.run(
                "approval_set_status",
                {
                    "approval_id": draft.approval_id,
                    "status": "pending",
                    "from_status": str(record.status),
                },
            )
        )
        return self.inner.get_approval(draft.approval_id)


# --- outcomes and resolution -------------------------------------------------------------


class GuessesFailed(Delegate):
    """An unknown outcome is recorded as a failure."""

    def finish_action(self, request):
        if request.outcome is EffectState.AMBIGUOUS:
            request = replace(request, outcome=EffectState.FAILED)
        return self.inner.finish_action(request)


class FailsTheHolderOnRefusal(Delegate):
    """Refusing a contender "cleans up" by failing the holder's attempt."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except DuplicateEffect as exc:
            if exc.state == DuplicateState.IN_PROGRESS:
                held = self.inner.get_effect(request.effect_key)
                self.inner.finish_action(
                    FinishRequest(
                        action_id=held.action_id,
                        receipt={
                            "receipt_id": f"rcp-clean-{held.action_id}",
                            "action_id": held.action_id,
                            "result": "failed",
                        },
                        effect_key=held.effect_key,
                        attempt=held.attempt,
                        outcome=EffectState.FAILED,
                    )
                )
            raise


class RaisesNotExecuted(Delegate):
    """Refusals are reported as "not executed"."""

    def start_action(self, request):
        try:
            return self.inner.start_action(request)
        except Refused as exc:
            raise NotExecuted(str(exc)) from exc


class FinishesInTwoTransactions(Delegate):
    """Writes the outcome, then (separately) the events and the receipt."""

    def finish_action(self, request):
        if request.effect_key is not None and request.outcome is not None:
            self.inner.transact(
                lambda txn: finish_effect_in_txn(
                    txn,
                    effect_key=request.effect_key,
                    action_id=request.action_id,
                    attempt=request.attempt or 0,
                    outcome=request.outcome,
                    result=request.result,
                    error=request.error,
                )
            )
        return self.inner.record(request.events, request.receipt)


class ResolvesAnything(Delegate):
    """Resolves whatever it is asked to, whatever the record's state."""

    def resolve_effect(self, key, state, resolver, *, by="human", attempt=None):
        record = self.inner.get_effect(key)
        if record is None or record.state is EffectState.AMBIGUOUS:
            return self.inner.resolve_effect(key, state, resolver, by=by, attempt=attempt)
        self.force(record, EffectState(state), resolver)
        return self.inner.get_effect(key)


class ResolvesAnyAttempt(Delegate):
    """Accepts a verdict bound to an attempt, and applies it to whichever attempt is there."""

    def resolve_effect(self, key, state, resolver, *, by="human", attempt=None):
        return self.inner.resolve_effect(key, state, resolver, by=by)


class ForgetsTheResolver(Delegate):
    """Never reports who resolved a record."""

    def _forget(self, record):
        return None if record is None else replace(record, resolved_by=None)

    def resolve_effect(self, *args, **kwargs):
        return self._forget(self.inner.resolve_effect(*args, **kwargs))

    def get_effect(self, key):
        return self._forget(self.inner.get_effect(key))


# --- evidence ----------------------------------------------------------------------------


class RenumbersEvents(Delegate):
    """Numbers events by their position in each answer."""

    def events(self, action_id=None):
        found = self.inner.events(action_id)
        return tuple(replace(event, event_id=i) for i, event in enumerate(found, start=1))


def _from_zero(receipt):
    if receipt is None or receipt.seq is None:
        return receipt
    return StoredReceipt(receipt.seq - 1, receipt.receipt_id, receipt.text, receipt.hash)


class NumbersReceiptsFromZero(Delegate):
    """Reports receipts one seq lower than stored (the chain starts at 0)."""

    def receipts(self, action_id=None):
        return tuple(_from_zero(r) for r in self.inner.receipts(action_id))

    def finish_action(self, request):
        return _from_zero(self.inner.finish_action(request))

    def record(self, events, receipt=None):
        return _from_zero(self.inner.record(events, receipt))


# --- two-phase-start, answers, listing, reuse, ambiguous-settles, close, evidence ----------


class BeginsTwice(Delegate):
    """Lets ``begin_execution`` move an attempt that is already executing."""

    def begin_execution(self, effect_key, action_id, attempt):
        record = self.inner.get_effect(effect_key)
        if record is not None and record.state is EffectState.EXECUTING:
            return record
        return self.inner.begin_execution(effect_key, action_id, attempt)


class AcceptsAnyApproverName(Delegate):
    """Folds a line break in an approver's name into a space instead of refusing it."""

    def grant_approval(self, approval_id, approver, *args, **kwargs):
        return self.inner.grant_approval(approval_id, approver.replace("\n", " "), *args, **kwargs)


class CountsAStaleQuorum(Delegate):
    """Counts a grant against the grants it saw before any simultaneous one landed (none):
    an M-of-N grant is stored, and the request never completes (the count read unlocked)."""

    def grant_approval(self, approval_id, approver, signature=None):
        record = self.inner.get_approval(approval_id)
        if record is None or record.required == 1 or record.status is not ApprovalStatus.PENDING:
            return self.inner.grant_approval(approval_id, approver, signature)

        def insert(txn):
            grant = {"approval_id": approval_id, "approver": approver, "signature": signature}
            txn.run("approval_grant_insert", {**grant, "granted_at": txn.ts(txn.now)})

        self.inner.transact(insert)
        return self.inner.get_approval(approval_id)


class ListsOnlyPending(Delegate):
    """Lists only pending requests when asked for all of them."""

    def list_approvals(self, status=None):
        return self.inner.list_approvals(status or ApprovalStatus.PENDING)


class ForgetsPendingRequests(Delegate):
    """Never finds the pending request, so an identical one is recorded again."""

    def put_approval_request(self, draft, events=()):
        unique = replace(draft, policy_hash=f"{draft.policy_hash}:{draft.approval_id}")
        return self.inner.put_approval_request(unique, events)


class DropsResultsThatAreNotJson(Delegate):
    """Records a result it cannot encode as no result at all."""

    def finish_action(self, request):
        try:
            json.dumps(request.result)
        except TypeError:
            request = replace(request, result=None)
        return self.inner.finish_action(request)


class FencesOnClose(Delegate):
    """Stops answering once closed."""

    closed = False

    def close(self):
        self.closed = True
        self.inner.close()

    def get_effect(self, key):
        return None if self.closed else self.inner.get_effect(key)


class ReservesInTwoTransactions(Delegate):
    """Spends a write transaction of its own before each reservation."""

    def start_action(self, request):
        self.inner.transact(lambda txn: None)
        return self.inner.start_action(request)


class CommitsWhatRaised(Delegate):
    """Commits the work of ``transact`` even when it raises (then re-raises)."""

    def transact(self, work):
        caught = []

        def keep(txn):
            try:
                return work(txn)
            except Exception as exc:  # kept, and raised after the COMMIT
                caught.append(exc)
                return None

        result = self.inner.transact(keep)
        if caught:
            raise caught[0]
        return result
