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
       result_json, error, resolved_by, write_token, committed_receipt_id
FROM {schema}.effects WHERE effect_key = %(effect_key)s;

-- name: effect_list
SELECT effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
       result_json, error, resolved_by, committed_receipt_id
FROM {schema}.effects ORDER BY created_at, effect_key;

-- name: effect_list_by_state
SELECT effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
       result_json, error, resolved_by, committed_receipt_id
FROM {schema}.effects WHERE state = %(state)s ORDER BY created_at, effect_key;

-- Every write below is one call to a function of the schema that runs as its owner
-- (migration 0004, decision 0024): an agent's role holds EXECUTE on it, never a write on a
-- table. A conditional write's function answers true when it changed its row, and the
-- statement selects a row only then, so the row count means what the UPDATE's did.

-- name: effect_insert
-- The reservation: the unique key decides the one winner; the caller checks the row count.
SELECT 1 AS changed
FROM {schema}.ctrlrun_insert_effect(
    %(effect_key)s::text, %(state)s::text, %(action_id)s::text, %(attempt)s::integer,
    %(created_at)s::timestamptz, %(updated_at)s::timestamptz,
    %(lease_expires_at)s::timestamptz, %(write_token)s::text
) AS w(ok)
WHERE w.ok;

-- name: effect_renew
SELECT 1 AS changed
FROM {schema}.ctrlrun_renew_effect(
    %(effect_key)s::text, %(state)s::text, %(action_id)s::text, %(attempt)s::integer,
    %(updated_at)s::timestamptz, %(lease_expires_at)s::timestamptz, %(write_token)s::text,
    %(from_attempt)s::integer, %(from_action_id)s::text
) AS w(ok)
WHERE w.ok;

-- name: effect_move
SELECT 1 AS changed
FROM {schema}.ctrlrun_move_effect(
    %(effect_key)s::text, %(state)s::text, %(updated_at)s::timestamptz,
    %(lease_expires_at)s::timestamptz, %(result_json)s::text, %(error)s::text,
    %(resolved_by)s::text, %(write_token)s::text, %(from_state)s::text, %(action_id)s::text,
    %(attempt)s::integer
) AS w(ok)
WHERE w.ok;

-- --- approvals -------------------------------------------------------------------------------

-- name: approval_get
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM {schema}.approvals WHERE approval_id = %(approval_id)s;

-- name: approval_get_locked
-- The request as approval_get reads it, its row locked until this transaction ends: the
-- grants an answer counts after it include every grant committed before it (READ COMMITTED
-- reads each statement afresh), so two simultaneous grants cannot both count one.
-- By ctrlrun_lock_approval (migration 0004): a row lock needs UPDATE on the table, which only
-- the owner holds.
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM {schema}.ctrlrun_lock_approval(%(approval_id)s::text);

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
SELECT 1 AS changed
FROM {schema}.ctrlrun_request_approval(
    %(approval_id)s::text, %(action_hash)s::text, %(action_json)s::text,
    %(policy_hash)s::text, %(status)s::text, %(created_at)s::timestamptz,
    %(expires_at)s::timestamptz, %(required)s::integer, %(excluded_json)s::text
) AS w(ok)
WHERE w.ok;

-- name: approval_grant_insert
SELECT 1 AS changed
FROM {schema}.ctrlrun_grant_approval(
    %(approval_id)s::text, %(approver)s::text, %(granted_at)s::timestamptz,
    %(signature)s::text
) AS w(ok)
WHERE w.ok;

-- name: approval_grant_list
SELECT approver, granted_at, signature FROM {schema}.approval_grants
WHERE approval_id = %(approval_id)s
ORDER BY granted_at, approver COLLATE "C";

-- name: approval_grant_list_all
-- Every grant of every request, for the verifier (kernel.evidence_check).
SELECT approval_id, approver, granted_at, signature FROM {schema}.approval_grants
ORDER BY approval_id COLLATE "C", granted_at, approver COLLATE "C";

-- name: approval_answer
SELECT 1 AS changed
FROM {schema}.ctrlrun_answer_approval(
    %(approval_id)s::text, %(status)s::text, %(approver)s::text, %(answered_at)s::timestamptz
) AS w(ok)
WHERE w.ok;

-- name: approval_set_status
-- Only to EXPIRED, and only past the request's expiry (at the transaction's time).
SELECT 1 AS changed
FROM {schema}.ctrlrun_expire_approval(
    %(approval_id)s::text, %(status)s::text, %(from_status)s::text, %(now)s::timestamptz
) AS w(ok)
WHERE w.ok;

-- name: approval_consume
-- Single use: a compare-and-set on 'granted', for this action's hash, unexpired; the caller
-- checks the row count.
SELECT 1 AS changed
FROM {schema}.ctrlrun_consume_approval(
    %(approval_id)s::text, %(action_hash)s::text, %(consumed_at)s::timestamptz,
    %(consumed_by)s::text
) AS w(ok)
WHERE w.ok;

-- --- events ----------------------------------------------------------------------------------

-- name: events_append
-- A transaction's events, in order, as one jsonb array (folded.events_json), stamped with
-- %(now)s (None: the server's now()).
SELECT {schema}.ctrlrun_append_events(%(now)s::timestamptz, %(events)s::jsonb) AS appended;

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
-- One partition's head, locked to the end of the transaction: `ctrlrun prune` serialises with
-- that chain's receipt writers by it (the owner's role: a row lock needs UPDATE, which no
-- other role holds). Receipts themselves are appended by the schema's functions
-- (receipt_link and the folded calls), which take the same lock.
SELECT seq, hash FROM {schema}.receipt_chain WHERE partition_id = %(partition)s FOR UPDATE;

-- name: chain_head_get
SELECT seq, hash FROM {schema}.receipt_chain WHERE partition_id = 0;

-- name: chain_heads_get
-- Every partition's head, 0, 1, … (the store's partition count is how many there are).
SELECT partition_id, seq, hash FROM {schema}.receipt_chain ORDER BY partition_id;

-- name: receipt_link
-- A chained receipt on its own (the shared path: PgTxn.link_receipt), by
-- ctrlrun_record_receipt with no events: its partition's head locked and held to the end of
-- the transaction, the receipt linked to it and hashed on the server, the head advanced. No
-- caller states a seq, a predecessor or a hash. Returns the receipt's seq, document and hash.
SELECT a.seq, a.document, a.hash
FROM {schema}.ctrlrun_record_receipt(
    %(r_now)s::timestamptz, '[]'::jsonb,
    %(r_receipt_id)s, %(r_action_id)s, %(r_effect_key)s, %(r_result)s, %(r_template)s,
    %(r_seq_mark)s, %(r_prev_mark)s, %(r_partition)s
) AS a;

-- name: receipt_get
SELECT receipt_id, seq, document, hash, partition_id FROM {schema}.receipts
WHERE receipt_id = %(receipt_id)s;

-- name: receipt_list
-- In the order they were written (each chain's receipts in seq order).
SELECT receipt_id, seq, document, hash, partition_id FROM {schema}.receipts
ORDER BY written;

-- name: receipt_list_verify
SELECT receipt_id, seq, action_id, effect_key, result, document, hash, partition_id, written
FROM {schema}.receipts
ORDER BY partition_id, seq;

-- name: receipt_list_by_action
SELECT receipt_id, seq, document, hash, partition_id FROM {schema}.receipts
WHERE action_id = %(action_id)s
ORDER BY written;

-- name: receipt_page
-- Chained receipts after the (partition, seq) given, recorded at or after the time given, a
-- page at a time in (partition, seq) order (a replay or a report streams them: its memory is
-- one page, whatever the chains' length).
SELECT partition_id, seq, document FROM {schema}.receipts
WHERE (partition_id, seq) > (%(after_partition)s, %(after)s) AND created_at >= %(since)s
ORDER BY partition_id, seq LIMIT %(page)s;

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

-- name: open_uncallable
-- The call functions (by name, %(names)s) this role may not execute: a role that does not own
-- the store is refused at open when it lacks one, instead of failing its first call.
SELECT p.proname AS name
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = %(schema)s AND p.proname = ANY(%(names)s::text[])
  AND NOT pg_catalog.has_function_privilege(p.oid, 'EXECUTE')
ORDER BY p.proname;

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
SELECT 1 AS changed
FROM {schema}.ctrlrun_record_template(
    %(action)s::text, %(template)s::text, %(recorded_at)s::timestamptz
) AS w(ok)
WHERE w.ok;

-- name: effect_template_accept
SELECT 1 AS changed
FROM {schema}.ctrlrun_accept_template(
    %(action)s::text, %(template)s::text, %(recorded_at)s::timestamptz, %(accepted_by)s::text
) AS w(ok)
WHERE w.ok;

-- name: effect_template_list
SELECT action, template, recorded_at, accepted_by FROM {schema}.effect_templates
ORDER BY action COLLATE "C";

-- --- budgets (docs/decisions/0028-budgets.md) ------------------------------------------------

-- name: budget_consume
SELECT spent FROM {schema}.ctrlrun_consume_budget(
    %(budget_id)s::text, %(window_start)s::timestamptz, %(amount)s::bigint,
    %(limit)s::bigint, %(force)s::boolean
) AS c(spent)
WHERE c.spent IS NOT NULL;

-- name: budget_charge_insert
SELECT {schema}.ctrlrun_charge_budget(
    %(action_id)s::text, %(budget_id)s::text, %(window_start)s::timestamptz,
    %(amount)s::bigint, %(charged_at)s::timestamptz
) AS changed;

-- name: budget_return
SELECT 1 AS returned FROM {schema}.ctrlrun_return_budget(
    %(action_id)s::text, %(returned_at)s::timestamptz
) AS r(ok)
WHERE r.ok;

-- name: budget_spent_get
SELECT spent FROM {schema}.budget_spend
WHERE budget_id = %(budget_id)s AND window_start = %(window_start)s::timestamptz;

-- name: budget_charge_get
SELECT action_id, budget_id, window_start, amount, charged_at, returned_at
FROM {schema}.budget_charges WHERE action_id = %(action_id)s;

-- name: budget_spend_list
SELECT budget_id, window_start, spent FROM {schema}.budget_spend
ORDER BY budget_id, window_start;

-- name: budget_prune_charges
-- `ctrlrun prune` (the owner): charges in windows that ended before the cutoff (a later window
-- of the same budget began by then; windows tumble). Giving one back could change no decision.
DELETE FROM {schema}.budget_charges AS c
WHERE EXISTS (
    SELECT 1 FROM {schema}.budget_spend AS later
    WHERE later.budget_id = c.budget_id
      AND later.window_start > c.window_start AND later.window_start <= %(before)s::timestamptz
);

-- name: budget_prune_windows
-- The windows themselves, by the same rule: each budget keeps its newest window.
DELETE FROM {schema}.budget_spend AS w
WHERE EXISTS (
    SELECT 1 FROM {schema}.budget_spend AS later
    WHERE later.budget_id = w.budget_id
      AND later.window_start > w.window_start AND later.window_start <= %(before)s::timestamptz
);
