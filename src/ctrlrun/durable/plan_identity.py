"""Who approved a plan, under the policy its steps run under: the same rules as an action's
approval. When the policy names approvers, the plan's approval must be signed by one of them
(``plan_grant_message``); when a step's action asks ``distinct_from_requester``, the agent or
user that proposed the plan cannot be the one who approved it."""

from __future__ import annotations

from ctrlrun.errors import PlanReason, PlanRefused
from ctrlrun.kernel.identity import identities, identity_key
from ctrlrun.kernel.plan import PlanRecord
from ctrlrun.kernel.policy import Policy
from ctrlrun.kernel.signing import plan_grant_message, verify


def plan_approval_refusal(record: PlanRecord, policy: Policy) -> PlanRefused | None:
    """The refusal for ``record``'s approval under ``policy``, or None when it stands (or the
    plan is not approved yet: the claim refuses that on its own)."""
    approver, approved = record.approver, record.approved_hash
    if approver is None or approved is None:
        return None
    distinct = any(
        (entry := policy.entry(step.action)) is not None and entry.approval.distinct_from_requester
        for step in record.steps
    )
    proposers = identities(name for name in (record.agent, record.user) if name)
    if distinct and identity_key(approver) in proposers:
        return PlanRefused(
            f"plan {record.plan_id} was approved by {approver!r}, who proposed it",
            reason=PlanReason.REQUESTER,
            plan_id=record.plan_id,
        )
    keys = policy.approvers
    if not keys:
        return None
    message = plan_grant_message(plan_id=record.plan_id, plan_hash=approved, approver=approver)
    if approver in keys and verify(keys[approver], message, record.approval_signature):
        return None
    return PlanRefused(
        f"plan {record.plan_id}'s approval is not signed by an approver the policy names",
        reason=PlanReason.UNSIGNED,
        plan_id=record.plan_id,
    )
