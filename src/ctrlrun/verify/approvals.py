"""G1 and G2: an approval authorises exactly the action it was granted for, once."""

from __future__ import annotations

from functools import partial
from typing import Final

from ctrlrun.errors import ApprovalMismatch, MismatchReason
from ctrlrun.kernel.approval import ApprovalStatus
from ctrlrun.kernel.event import EventType
from ctrlrun.kernel.policy import Decision

from .lab import Lab, NotApplicable, Passed, Remote
from .synthesis import PREFIX, Vector, variants

NO_APPROVE: Final = "no action can be decided `approve` (no approve rule or decision)"
EXTRA: Final = f"{PREFIX.replace('-', '_')}_extra"


def _approve_target(lab: Lab) -> Vector:
    picked = lab.pick(lambda t: True, decisions=(Decision.APPROVE,))
    if picked is None:
        raise NotApplicable(NO_APPROVE)
    return picked[1]


def mutated_approval_refused(lab: Lab) -> Passed:
    """G1. An approval granted for one action is presented with a mutated action that still
    lands in the same rule: refused ``ApprovalMismatch(reason=mismatch)``, executor 0 calls,
    the approval still granted, ``APPROVAL_INVALIDATED`` recorded. Control: the original
    action with the same approval commits (executor 1 call)."""
    vector = _approve_target(lab)
    others = variants(lab.policy, vector.target, 2, by="action_hash")
    control, remote = lab.control(), Remote()
    original = vector.action()
    if len(others) > 1:
        mutated = others[1].action()
        changed = _changed(vector, others[1])
    else:
        mutated = vector.action({EXTRA: f"{PREFIX}-mutated"})
        changed = f"an extra argument {EXTRA} no rule reads"
    approval = lab.approve(control, original)
    refusal = lab.expect(
        f"present the approval with {changed}",
        partial(control.execute, mutated, remote, approval_id=approval),
        ApprovalMismatch,
        reason=MismatchReason.MISMATCH,
    )
    lab.check(remote.calls == 0, f"the executor ran {remote.calls} times for the mutated action")
    record = lab.store.get_approval(approval)
    lab.check(
        record is not None and record.status is ApprovalStatus.GRANTED,
        f"after the refusal the approval is {record.status if record else 'gone'}",
    )
    kinds = [e.type for e in lab.store.events(mutated.action_id)]
    lab.check(EventType.APPROVAL_INVALIDATED in kinds, f"no APPROVAL_INVALIDATED: {kinds}")
    lab.control_ok(
        "the original action with the same approval",
        partial(control.execute, original, remote, approval_id=approval),
    )
    lab.check(remote.calls == 1, f"control: the executor ran {remote.calls} times, expected 1")
    return Passed(
        lab.action,
        f"{changed}: {type(refusal).__name__}({refusal.reason}), executor 0 calls, approval"
        " still granted; control: the original committed",
    )


def _changed(first: Vector, second: Vector) -> str:
    names = sorted(k for k in second.arguments if first.arguments.get(k) != second.arguments[k])
    return "changed " + ", ".join(
        f"{k}={first.arguments.get(k)!r}→{second.arguments[k]!r}" for k in names
    )


def replayed_approval_refused(lab: Lab) -> Passed:
    """G2. An approval that authorised one action is presented again for the same action
    (a new call): refused ``ApprovalMismatch(reason=consumed)``; the executor ran once in all.
    Control: the first presentation commits."""
    vector = _approve_target(lab)
    control, remote = lab.control(), Remote()
    approval = lab.approve(control, vector.action())
    lab.control_ok(
        "the first presentation",
        partial(control.execute, vector.action(), remote, approval_id=approval),
    )
    lab.check(remote.calls == 1, f"control: the first presentation ran {remote.calls} times")
    lab.expect(
        "present the same approval again",
        partial(control.execute, vector.action(), remote, approval_id=approval),
        ApprovalMismatch,
        reason=MismatchReason.CONSUMED,
    )
    lab.check(remote.calls == 1, f"the executor ran {remote.calls} times in all, expected 1")
    return Passed(
        lab.action,
        "replay refused as consumed, executor 1 call in all; control: the first committed",
    )
