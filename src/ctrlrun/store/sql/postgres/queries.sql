-- Named queries for the Postgres store. Parameters are named (%(name)s). {schema} is the only
-- identifier ever interpolated: it is composed with psycopg.sql.Identifier, never formatted as
-- text. Every statement names its schema, so nothing depends on search_path. Names match the
-- SQLite file where the meaning is the same.

-- --- transactions ----------------------------------------------------------------------------

-- name: clock_now
-- The server's time (inside a write transaction, its start: sent in the same message as the
-- deferred BEGIN when it is the first statement; outside one, the statement's time).
SELECT now() AS now;

-- name: clock_read
-- One reading of the server's wall clock (for measuring the application clock's skew).
SELECT clock_timestamp() AS server_now;

-- --- effects ---------------------------------------------------------------------------------

-- name: effect_get
SELECT effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
       result_json, error, resolved_by, write_token
FROM {schema}.effects WHERE effect_key = %(effect_key)s;

-- name: effect_list
SELECT effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
       result_json, error, resolved_by
FROM {schema}.effects ORDER BY created_at, effect_key;

-- name: effect_list_by_state
SELECT effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
       result_json, error, resolved_by
FROM {schema}.effects WHERE state = %(state)s ORDER BY created_at, effect_key;

-- name: effect_insert
-- The reservation: the unique key decides the one winner; the caller checks the row count.
INSERT INTO {schema}.effects
    (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
     write_token)
VALUES
    (%(effect_key)s, %(state)s, %(action_id)s, %(attempt)s, %(created_at)s, %(updated_at)s,
     %(lease_expires_at)s, %(write_token)s)
ON CONFLICT (effect_key) DO NOTHING;

-- name: effect_renew
UPDATE {schema}.effects
SET state = %(state)s, action_id = %(action_id)s, attempt = %(attempt)s,
    updated_at = %(updated_at)s, lease_expires_at = %(lease_expires_at)s, result_json = NULL,
    error = NULL, resolved_by = NULL, write_token = %(write_token)s
WHERE effect_key = %(effect_key)s AND state = 'failed' AND attempt = %(from_attempt)s
  AND action_id = %(from_action_id)s;

-- name: effect_move
UPDATE {schema}.effects
SET state = %(state)s, updated_at = %(updated_at)s, lease_expires_at = %(lease_expires_at)s,
    result_json = %(result_json)s, error = %(error)s,
    resolved_by = COALESCE(%(resolved_by)s, resolved_by), write_token = %(write_token)s
WHERE effect_key = %(effect_key)s AND state = %(from_state)s AND action_id = %(action_id)s
  AND attempt = %(attempt)s;

-- --- approvals -------------------------------------------------------------------------------

-- name: approval_get
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM {schema}.approvals WHERE approval_id = %(approval_id)s;

-- name: approval_get_locked
-- The request as approval_get reads it, its row locked until this transaction ends: the
-- grants an answer counts after it include every grant committed before it (READ COMMITTED
-- reads each statement afresh), so two simultaneous grants cannot both count one.
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM {schema}.approvals WHERE approval_id = %(approval_id)s
FOR UPDATE;

-- name: approval_list
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM {schema}.approvals ORDER BY created_at, approval_id;

-- name: approval_list_by_status
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM {schema}.approvals WHERE status = %(status)s ORDER BY created_at, approval_id;

-- name: approval_find
-- The requests made for one action under one policy, oldest first (approvals_by_action).
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM {schema}.approvals
WHERE action_hash = %(action_hash)s AND policy_hash = %(policy_hash)s
ORDER BY created_at, approval_id;

-- name: approval_lock
-- Serialises the requests for one action until this transaction ends, so two identical calls
-- cannot both find no request and make two (transaction-scoped: safe behind pgbouncer).
SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(%(action_hash)s, 0));

-- name: approval_insert
INSERT INTO {schema}.approvals
    (approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
     required, excluded_json)
VALUES
    (%(approval_id)s, %(action_hash)s, %(action_json)s, %(policy_hash)s, %(status)s,
     %(created_at)s, %(expires_at)s, %(required)s, %(excluded_json)s);

-- name: approval_grant_insert
INSERT INTO {schema}.approval_grants (approval_id, approver, granted_at, signature)
VALUES (%(approval_id)s, %(approver)s, %(granted_at)s, %(signature)s)
ON CONFLICT (approval_id, approver) DO NOTHING;

-- name: approval_grant_list
SELECT approver, granted_at, signature FROM {schema}.approval_grants
WHERE approval_id = %(approval_id)s
ORDER BY granted_at, approver COLLATE "C";

-- name: approval_grant_list_all
-- Every grant of every request, for the verifier (kernel.evidence_check).
SELECT approval_id, approver, granted_at, signature FROM {schema}.approval_grants
ORDER BY approval_id COLLATE "C", granted_at, approver COLLATE "C";

-- name: approval_answer
UPDATE {schema}.approvals
SET status = %(status)s, approver = %(approver)s, answered_at = %(answered_at)s
WHERE approval_id = %(approval_id)s AND status = 'pending';

-- name: approval_set_status
UPDATE {schema}.approvals SET status = %(status)s
WHERE approval_id = %(approval_id)s AND status = %(from_status)s;

-- name: approval_consume
-- Single use: a compare-and-set on 'granted'; the caller checks the row count.
UPDATE {schema}.approvals
SET status = 'consumed', consumed_at = %(consumed_at)s, consumed_by = %(consumed_by)s
WHERE approval_id = %(approval_id)s AND status = 'granted';

-- --- events ----------------------------------------------------------------------------------

-- name: event_insert
INSERT INTO {schema}.events (ts, type, action_id, effect_key, approval_id, data_json)
VALUES (%(ts)s, %(type)s, %(action_id)s, %(effect_key)s, %(approval_id)s, %(data_json)s);

-- name: event_list
SELECT event_id, ts, type, action_id, effect_key, approval_id, data_json
FROM {schema}.events ORDER BY event_id;

-- name: event_list_by_action
SELECT event_id, ts, type, action_id, effect_key, approval_id, data_json
FROM {schema}.events WHERE action_id = %(action_id)s ORDER BY event_id;

-- name: event_denial_reason
-- The latest denial of one request (its reason, if given): read backwards from the
-- newest event, only on the path of a call a person denied.
SELECT data_json FROM {schema}.events
WHERE approval_id = %(approval_id)s AND type = 'APPROVAL_DENIED'
ORDER BY event_id DESC LIMIT 1;

-- --- receipts and the chain ------------------------------------------------------------------

-- name: chain_head_lock
-- Taken first by every receipt write and held to the end of its transaction.
SELECT seq, hash FROM {schema}.receipt_chain WHERE id = 1 FOR UPDATE;

-- name: chain_head_get
SELECT seq, hash FROM {schema}.receipt_chain WHERE id = 1;

-- name: chain_head_set
UPDATE {schema}.receipt_chain SET seq = %(seq)s, hash = %(hash)s WHERE id = 1;

-- name: receipt_insert
INSERT INTO {schema}.receipts
    (receipt_id, seq, action_id, effect_key, result, document, hash, created_at)
VALUES
    (%(receipt_id)s, %(seq)s, %(action_id)s, %(effect_key)s, %(result)s, %(document)s,
     %(hash)s, %(created_at)s);

-- name: receipt_get
SELECT receipt_id, seq, document, hash FROM {schema}.receipts
WHERE receipt_id = %(receipt_id)s;

-- name: receipt_list
SELECT receipt_id, seq, document, hash FROM {schema}.receipts
ORDER BY seq NULLS LAST, created_at;

-- name: receipt_list_verify
SELECT receipt_id, seq, action_id, effect_key, result, document, hash FROM {schema}.receipts
ORDER BY seq NULLS LAST, created_at;

-- name: receipt_list_by_action
SELECT receipt_id, seq, document, hash FROM {schema}.receipts WHERE action_id = %(action_id)s
ORDER BY seq NULLS LAST, created_at;

-- name: receipt_page
-- Chained receipts after seq %(after)s recorded at or after %(since)s, a page at a time in seq
-- order (a replay or a report streams them: its memory is one page, whatever the chain's length).
SELECT seq, document FROM {schema}.receipts
WHERE seq > %(after)s AND created_at >= %(since)s
ORDER BY seq LIMIT %(page)s;

-- --- opening: catalog probes and schema versions ---------------------------------------------

-- name: open_probe
-- Everything the at-open checks need, in one round trip (the schema is a value here).
SELECT pg_catalog.pg_is_in_recovery() AS in_recovery,
       pg_catalog.current_setting('server_encoding') AS server_encoding,
       current_user AS role_name,
       n.oid IS NOT NULL AS schema_exists,
       COALESCE(pg_catalog.has_schema_privilege(n.oid, 'USAGE'), false) AS can_use,
       COALESCE(pg_catalog.has_schema_privilege(n.oid, 'CREATE'), false) AS can_create
FROM (SELECT 1) AS one
LEFT JOIN pg_catalog.pg_namespace AS n ON n.nspname = %(schema)s;

-- name: schema_tables
SELECT c.relname AS name
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY c.relname;

-- name: schema_version_create
-- Created in the first migration's transaction: a concurrent first start blocks on it until
-- that transaction ends, then fails and finds the work done.
CREATE TABLE {schema}.schema_version (
    migration_id    text COLLATE "C" PRIMARY KEY,
    applied_at      timestamptz NOT NULL,
    ctrlrun_version text NOT NULL
);

-- name: schema_version_lock
-- Serialises migrators for the rest of the transaction (self-conflicting, lets readers read).
LOCK TABLE {schema}.schema_version IN SHARE ROW EXCLUSIVE MODE;

-- name: schema_version_list
SELECT migration_id FROM {schema}.schema_version ORDER BY migration_id;

-- name: schema_version_insert
INSERT INTO {schema}.schema_version (migration_id, applied_at, ctrlrun_version)
VALUES (%(migration_id)s, now(), %(ctrlrun_version)s);

-- --- effect-key templates -------------------------------------------------------------------

-- name: effect_template_get
SELECT action, template, recorded_at, accepted_by FROM {schema}.effect_templates
WHERE action = %(action)s;

-- name: effect_template_insert
INSERT INTO {schema}.effect_templates (action, template, recorded_at, accepted_by)
VALUES (%(action)s, %(template)s, %(recorded_at)s, NULL)
ON CONFLICT (action) DO NOTHING;

-- name: effect_template_accept
INSERT INTO {schema}.effect_templates (action, template, recorded_at, accepted_by)
VALUES (%(action)s, %(template)s, %(recorded_at)s, %(accepted_by)s)
ON CONFLICT (action) DO UPDATE
SET template = excluded.template, recorded_at = excluded.recorded_at,
    accepted_by = excluded.accepted_by;

-- name: effect_template_list
SELECT action, template, recorded_at, accepted_by FROM {schema}.effect_templates
ORDER BY action COLLATE "C";
