-- Approvals given by several people, and never by the one who asked (docs/approvals.md).
--
-- Every grant is a row of approval_grants, one per approver: a request needing N distinct
-- approvers (the policy's approval.count) is GRANTED by its N-th. required and excluded_json
-- are what the policy said when the request was made (excluded_json: the requesting agent
-- and user, when the policy says distinct_from_requester); the first transaction of the call
-- that presents it checks the grants again against the policy it runs under.

ALTER TABLE approvals ADD COLUMN required INTEGER NOT NULL DEFAULT 1;

ALTER TABLE approvals ADD COLUMN excluded_json TEXT NOT NULL DEFAULT '[]';

CREATE TABLE approval_grants (
    approval_id TEXT NOT NULL,
    approver    TEXT NOT NULL,
    granted_at  TEXT NOT NULL,
    signature   TEXT,
    PRIMARY KEY (approval_id, approver)
) WITHOUT ROWID;
