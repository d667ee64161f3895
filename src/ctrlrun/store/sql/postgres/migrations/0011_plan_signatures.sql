-- ctrlrun Postgres schema: a plan approval signed by an approver the policy names
-- (docs/approvals.md). {schema} is composed as an identifier. Applied in one transaction
-- together with its schema_version row. The runner verifies it before any step runs when the
-- policy names approvers, as a call's first transaction verifies an action's grants.

ALTER TABLE {schema}.plans ADD COLUMN approval_signature text;
