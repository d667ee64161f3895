"""Approval requests: answered by a valid name before they expire, listed and found by status,
and one pending request per action and policy (an identical request returns it)."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Final

from ctrlrun.errors import (
    ActionDenied,
    ApprovalMismatch,
    DenyReason,
    InvalidArgument,
    MismatchReason,
)
from ctrlrun.kernel.approval import ApprovalRecord, ApprovalRequestDraft, ApprovalStatus
from ctrlrun.kernel.event import EventType
from ctrlrun.store.protocol import StateStore

from .framework import (
    APPROVER,
    HASH_A,
    HASH_B,
    Case,
    CaseContext,
    check,
    expect_refusal,
    start,
    state_of,
)

POLICY: Final = "sha256:" + "0c" * 32
TTL: Final = timedelta(minutes=15)


def _request(
    store: StateStore,
    approval_id: str,
    action_hash: str = HASH_A,
    *,
    policy: str = POLICY,
    ttl: timedelta = TTL,
) -> ApprovalRecord:
    action = {"action_id": f"act-{action_hash[-4:]}", "name": "conformance.approve"}
    return store.put_approval_request(
        ApprovalRequestDraft(approval_id, action, action_hash, policy, ttl)
    )


def _status(store: StateStore, approval_id: str) -> ApprovalStatus | None:
    record = store.get_approval(approval_id)
    return None if record is None else record.status


def answers(ctx: CaseContext) -> str:
    """A request is answered once, by a valid name, before it expires: a grant after expiry is
    refused (``expired``) and recorded EXPIRED; a denied request presented to a call denies it
    (``approval_denied``) and cannot then be granted (``answered``); an unknown id is refused
    (``unknown``); an approver name with a line break is refused (``InvalidArgument``) and the
    request stays pending."""
    store = ctx.scratch.open(ctx.clock)
    late, denied, pending = ctx.action("late"), ctx.action("denied"), ctx.action("pending")
    _request(store, late)
    ctx.clock.advance(TTL + timedelta(microseconds=1))
    grant = partial(store.grant_approval, late, APPROVER)
    expect_refusal("grant after expiry", grant, ApprovalMismatch, reason=MismatchReason.EXPIRED)
    check(_status(store, late) is ApprovalStatus.EXPIRED, "a late grant did not record EXPIRED")
    _request(store, denied, HASH_B)
    store.deny_approval(denied, APPROVER)
    expect_refusal(
        "present a denied approval",
        partial(start, store, ctx.key(), ctx.action(), approval_id=denied, action_hash=HASH_B),
        ActionDenied,
        reason=DenyReason.APPROVAL_DENIED,
    )
    check(state_of(store, ctx.key()) == "absent", "a denied approval reserved the key")
    regrant = partial(store.grant_approval, denied, APPROVER)
    expect_refusal(
        "grant a denied request", regrant, ApprovalMismatch, reason=MismatchReason.ANSWERED
    )
    unknown = partial(store.grant_approval, ctx.action("nope"), APPROVER)
    expect_refusal("grant an unknown id", unknown, ApprovalMismatch, reason=MismatchReason.UNKNOWN)
    _request(store, pending, "sha256:" + "0d" * 32)
    two_lines = partial(store.grant_approval, pending, "two\nlines")
    expect_refusal("grant as a name with a line break", two_lines, InvalidArgument)
    check(_status(store, pending) is ApprovalStatus.PENDING, "a refused name answered the request")
    return "late grant → expired; denied → denies the call, not re-grantable; bad ids and names"


def listing(ctx: CaseContext) -> str:
    """``list_approvals`` filters by status and lists all without one; ``find_approvals``
    returns every request for one action hash under one policy, whatever its status, and
    nothing for another action or policy."""
    store = ctx.scratch.open()
    first, second = ctx.action("first"), ctx.action("second")
    _request(store, first)
    _request(store, second, HASH_B)
    store.grant_approval(second, APPROVER)
    pending = [a.approval_id for a in store.list_approvals(ApprovalStatus.PENDING)]
    check(pending == [first], f"list_approvals(PENDING) returned {pending}")
    every = sorted(a.approval_id for a in store.list_approvals())
    check(every == sorted((first, second)), f"list_approvals() returned {every}")
    found = [(a.approval_id, a.status) for a in store.find_approvals(HASH_B, POLICY)]
    check(found == [(second, ApprovalStatus.GRANTED)], f"find_approvals returned {found}")
    other = store.find_approvals(HASH_B, "sha256:" + "ff" * 32)
    check(other == (), f"find_approvals under another policy returned {other}")
    return "listed by status and in full; found by action and policy only"


def reuse(ctx: CaseContext) -> str:
    """An identical pending request (same action hash and policy) is returned, not duplicated,
    with an ``APPROVAL_REUSED`` event; a request under another policy, or after the pending
    one expired, is a new request."""
    store = ctx.scratch.open(ctx.clock)
    first, again = ctx.action("first"), ctx.action("again")
    made = _request(store, first, ttl=timedelta(seconds=5))
    returned = _request(store, again)
    check(
        made.approval_id == first and returned.approval_id == first,
        f"an identical request made {returned.approval_id}, expected {first} returned",
    )
    listed = [a.approval_id for a in store.list_approvals()]
    check(listed == [first], f"an identical request was duplicated: {listed}")
    reused = [e.approval_id for e in store.events() if e.type is EventType.APPROVAL_REUSED]
    check(reused == [first], f"APPROVAL_REUSED events name {reused}, expected [{first}]")
    other = _request(store, ctx.action("other-policy"), policy="sha256:" + "ee" * 32)
    check(other.approval_id == ctx.action("other-policy"), "another policy reused the request")
    ctx.clock.advance(timedelta(seconds=6))
    fresh = _request(store, ctx.action("after-expiry"))
    check(fresh.approval_id == ctx.action("after-expiry"), "an expired request was reused")
    return "identical pending request returned and evented; other policy or expiry → new"


CASES: Final = (
    Case.of("approvals", "answers", answers),
    Case.of("approvals", "listing", listing),
    Case.of("approvals", "reuse", reuse),
)
