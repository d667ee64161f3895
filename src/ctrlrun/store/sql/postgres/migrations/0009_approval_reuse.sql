-- ctrlrun Postgres schema: approval requests found by the action they are for
-- (docs/approvals.md, "No orphans"). {schema} is composed as an identifier. Applied in one
-- transaction together with its schema_version row.
--
-- A call that needs an approval first looks for one already made for the identical action
-- (same action hash, which covers the principal, under the same policy hash): an unexpired
-- grant is presented, an unexpired denial denies, a pending request is returned instead of a
-- new one. Those lookups are by action hash; only calls that need a person make them.

CREATE INDEX approvals_by_action ON {schema}.approvals (action_hash);
