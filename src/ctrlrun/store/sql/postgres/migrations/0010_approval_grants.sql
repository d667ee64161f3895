-- ctrlrun Postgres schema: approvals given by several people, and never by the one who asked
-- (docs/approvals.md). {schema} is composed as an identifier. Applied in one transaction
-- together with its schema_version row.
--
-- Every grant is a row of approval_grants, one per approver: a request needing N distinct
-- approvers (the policy's approval.count) is GRANTED by its N-th. required and excluded_json
-- are what the policy said when the request was made (excluded_json: the requesting agent
-- and user, when the policy says distinct_from_requester); the first transaction of the call
-- that presents it checks the grants again against the policy it runs under.

ALTER TABLE {schema}.approvals ADD COLUMN required integer NOT NULL DEFAULT 1;

ALTER TABLE {schema}.approvals ADD COLUMN excluded_json text NOT NULL DEFAULT '[]';

CREATE TABLE {schema}.approval_grants (
    approval_id text COLLATE "C" NOT NULL,
    approver    text COLLATE "C" NOT NULL,
    granted_at  timestamptz NOT NULL,
    signature   text,
    PRIMARY KEY (approval_id, approver)
);
