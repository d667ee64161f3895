-- A plan approval signed by an approver the policy names (docs/approvals.md): the runner
-- verifies it before any step runs when the policy names approvers, as a call's first
-- transaction verifies an action's grants.

ALTER TABLE plans ADD COLUMN approval_signature TEXT;
