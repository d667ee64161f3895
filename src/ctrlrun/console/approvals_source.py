"""What the inbox reads and answers through: the store's approval methods (the console has a
store, not a policy), and a view of each request for the page.

Progress (``approvers`` of ``required``) comes from the request's grant rows. With the
console's own Ed25519 key (``ctrlrun console --approver-key FILE``), every grant is signed as
the signed-in person: a policy that names approvers lists the console's people with the
console's public key, and the call that spends the grant verifies it (docs/approvals.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ctrlrun._time import utc_now
from ctrlrun.canonical import canonical_text
from ctrlrun.errors import InvalidArgument
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalStatus
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.request_check import recomputed_hash
from ctrlrun.runtime.answering import refuse_if_tampered, sign_answer, split_tampered
from ctrlrun.runtime.request_facts import RequestFacts, request_facts
from ctrlrun.store.ops.approvals import grants_in_txn


@dataclass(frozen=True, slots=True)
class Pending:
    """One approval request as the inbox shows it."""

    id: str
    name: str
    arguments: dict[str, Any]
    arguments_text: str  # canonical JSON: exactly what the hash covers
    action_hash: str
    principal: Any
    rule: str | None
    controls: tuple[str, ...]
    state: str
    requested_at: datetime
    expires_at: datetime
    approvers: tuple[str, ...]
    required: int
    decided_by: str | None
    reason: str | None
    facts: RequestFacts = field(default_factory=RequestFacts)


@dataclass(frozen=True, slots=True)
class Tampered:
    """A request whose stored action does not hash to the action it binds: only its id, the
    hash it binds and what its stored action hashes to (None: it does not rebuild)."""

    id: str
    action_hash: str
    recomputed_hash: str | None
    requested_at: datetime


def view(
    record: ApprovalRecord,
    reason: str | None = None,
    granted_by: tuple[str, ...] = (),
    facts: RequestFacts | None = None,
) -> Pending:
    """The inbox's view of a stored request (``granted_by``: who has granted it so far;
    ``facts``: what a person needs beside it, ``request_facts``)."""
    action = record.action
    arguments = action.get("arguments", {})
    return Pending(
        id=record.approval_id,
        name=str(action.get("name", "")),
        arguments=arguments if isinstance(arguments, dict) else {"": arguments},
        arguments_text=canonical_text(arguments),
        action_hash=record.action_hash,
        principal=action.get("principal"),
        rule=action.get("rule"),
        controls=tuple(str(c) for c in action.get("controls", ()) or ()),
        state=str(record.status),
        requested_at=record.created_at,
        expires_at=record.expires_at,
        approvers=granted_by or ((record.approver,) if record.approver else ()),
        required=record.required,
        decided_by=record.approver,
        reason=reason,
        facts=facts or RequestFacts(),
    )


class InboxSource:
    """Pending requests, and the two answers, over one store; grants signed with
    ``signing_key`` (a PEM Ed25519 private key) when given; the rule's text and the
    arguments' display read from ``policy`` (the file beside the store) when given."""

    def __init__(
        self,
        store: Any,
        signing_key: bytes | None = None,
        approver_keys: Mapping[str, str] | None = None,
        policy: Policy | None = None,
    ) -> None:
        self.store = store
        self.signing_key = signing_key
        self.approver_keys: Mapping[str, str] = approver_keys or {}
        self.policy = policy

    def pending(self) -> list[Pending]:
        """Intact requests still waiting and not expired, newest first, with who granted so
        far and what a person needs to decide them. A request whose stored action does not
        hash to the action it binds is left out (``tampered``) and recorded as an event."""
        return self.listing()[0]

    def tampered(self) -> list[Tampered]:
        """Waiting requests whose stored action does not hash to the action they bind: shown
        as tampering, never as a request, with no way to answer them."""
        return self.listing()[1]

    def listing(self) -> tuple[list[Pending], list[Tampered]]:
        """``(pending, tampered)`` from one read of the waiting requests."""
        now = utc_now()
        records = [
            r for r in self.store.list_approvals(ApprovalStatus.PENDING) if not r.is_expired(now)
        ]
        intact, tampered = split_tampered(self.store, records)
        live = [self._view(r) for r in intact]
        shown = [
            Tampered(r.approval_id, r.action_hash, recomputed_hash(r.action), r.created_at)
            for r in tampered
        ]
        return sorted(live, key=lambda p: p.requested_at, reverse=True), shown

    def _view(self, record: ApprovalRecord) -> Pending:
        granted_by = self._granted_by(record)
        facts = request_facts(self.store, record, self.policy, len(granted_by))
        return view(record, granted_by=granted_by, facts=facts)

    def _granted_by(self, record: ApprovalRecord) -> tuple[str, ...]:
        if record.required == 1:  # nothing granted yet, or it would not be pending
            return ()
        grants = self.store.read(lambda txn: grants_in_txn(txn, record.approval_id))
        return tuple(g.approver for g in grants)

    def grant(
        self, approval_id: str, approver: str, action_hash: str, reason: str | None = None
    ) -> Pending:
        """Grant ``approval_id`` as ``approver`` (with ``reason``, when given), only if it
        still holds the action whose hash the person reviewed (``action_hash``) and that
        action still hashes to it; otherwise nothing is written (tampering is recorded as an
        event). Signed over the recomputed hash with the console's key, when it has one."""
        held = self.store.get_approval(approval_id)
        refuse_if_tampered(self.store, held)
        if held is not None and held.action_hash != action_hash:
            raise InvalidArgument(
                f"approval {approval_id} is for action {held.action_hash}, not the one you"
                " reviewed; nothing granted"
            )
        signature = self._sign(held, approver, grant=True)
        granted = self.store.grant_approval(approval_id, approver, signature, reason)
        return view(granted, granted_by=self._granted_by(granted))

    def deny(self, approval_id: str, approver: str, reason: str) -> Pending:
        """Deny ``approval_id`` as ``approver`` with ``reason``; refused if it was tampered
        with; signed with the console's key, when it has one."""
        held = self.store.get_approval(approval_id)
        refuse_if_tampered(self.store, held)
        signature = self._sign(held, approver, grant=False)
        return view(self.store.deny_approval(approval_id, approver, reason, signature), reason)

    def _sign(self, record: ApprovalRecord | None, approver: str, *, grant: bool) -> str | None:
        """The answer's signature with the console's key (over the recomputed hash). When the
        policy the console was started with names approvers, every answer must be signed by
        the signed-in person's own key: refused otherwise, before anything is written."""
        if record is None:
            return None  # the store refuses an unknown request
        return sign_answer(self.approver_keys, record, approver, self.signing_key, grant=grant)
