"""An M-of-N request granted by N approvers at once: the grants are counted under a lock, so
the request always ends GRANTED, by exactly M of them."""

from __future__ import annotations

from typing import Final

from ctrlrun.kernel.approval import ApprovalRequestDraft, ApprovalStatus
from ctrlrun.store.protocol import StateStore

from .contention import race_processes
from .framework import HASH_A, Case, CaseContext, CaseFailed, check, require_url

REQUIRED: Final = (2, 3)
POLICY: Final = "sha256:" + "0e" * 32


def _race(store: StateStore, url: str, approval_id: str, required: int, n: int) -> None:
    action = {"action_id": f"act-{approval_id}", "name": "conformance.approve"}
    draft = ApprovalRequestDraft(approval_id, action, HASH_A, POLICY, required=required)
    store.put_approval_request(draft)
    approvers = [f"approver-{i}" for i in range(n)]
    payloads = [
        {"task": "grant", "approval_id": approval_id, "approver": name, "action_id": name}
        for name in approvers
    ]
    race = race_processes(url, payloads)
    winners = sorted(str(o["action_id"]) for o in race.with_outcome("won"))
    for output in race.outputs:
        outcome = str(output.get("outcome"))
        check(
            outcome in {"won", "refused:ApprovalMismatch:answered"},
            f"{required}-of-{n}: a grant got {outcome}, expected won or ApprovalMismatch(answered)",
        )
    record = store.get_approval(approval_id)
    if record is None:
        raise CaseFailed(f"approval {approval_id} vanished")
    check(
        record.status is ApprovalStatus.GRANTED,
        f"{required}-of-{n}: {len(winners)} grants were accepted and the request is"
        f" {record.status}, not granted",
    )
    check(
        len(winners) == required,
        f"{required}-of-{n}: {len(winners)} grants were accepted, expected exactly {required}",
    )
    named = sorted((record.approver or "").split(", "))
    check(named == winners, f"the request names {named}, the accepted grants were {winners}")


def quorum_cross_process(ctx: CaseContext) -> str:
    """N OS processes grant one M-of-N request as N distinct approvers at once (M = 2, then
    3, each at most N): the request ends GRANTED, exactly M grants are accepted and named by
    it, and every other is refused ``answered``."""
    url = require_url(ctx)
    store = ctx.scratch.open()
    n = ctx.processes
    quorums = [m for m in REQUIRED if m <= n]  # with --processes 2, only 2-of-2
    for required in quorums:
        _race(store, url, ctx.action(f"quorum-{required}"), required, n)
    done = " and ".join(f"{m}-of-{n}" for m in quorums)
    return f"{n} processes granted {done} at once: each granted by exactly its quorum"


CASES: Final = (Case.of("approvals", "quorum-cross-process", quorum_cross_process),)
