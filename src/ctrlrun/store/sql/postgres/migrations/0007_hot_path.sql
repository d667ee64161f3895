-- ctrlrun Postgres schema: the protected call's hot tables keep only the indexes a write needs,
-- as the SQLite store's do (its 0001_baseline and 0004_hot_path; docs/decisions/0010-postgres-
-- indexes.md). {schema} is composed as an identifier. Applied in one transaction together with
-- its schema_version row.
--
-- Every call inserted five entries into events_by_action and one into receipts_by_action, and
-- its outcome's UPDATE changed the indexed state column, so effects_by_state took a new entry
-- and the update could never be HOT. All three serve only an operator's reads (`ctrlrun
-- inspect`, `ctrlrun effects --state`, verify and conformance on scratch schemas), which now
-- scan. Measured A/B on one server, same run: 50-80 us less per protected call (~4%).

DROP INDEX {schema}.events_by_action;

DROP INDEX {schema}.receipts_by_action;

DROP INDEX {schema}.effects_by_state;
