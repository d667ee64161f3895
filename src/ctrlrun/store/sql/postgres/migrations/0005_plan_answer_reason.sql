-- Why a person approved or rejected a plan, in their words (`ctrlrun plans approve|reject
-- --reason`): every command where a person answers records who and why (issue 27).

ALTER TABLE {schema}.plans ADD COLUMN answer_reason text;
