-- Named queries for durable step execution on Postgres. Parameters are %(name)s; tables are
-- {schema}.name, composed by the store with psycopg.sql.Identifier. Every lease and due time is
-- stamped and compared with the server's now() (one clock for every host); the Python side
-- passes lengths (*_seconds), never absolute instants, for those. Claims lock with
-- FOR UPDATE SKIP LOCKED; every transition is conditional on the state it leaves, and its row
-- count is checked by the caller. Parameters that may be NULL are cast to their type.

-- ---------------------------------------------------------------------------------- outbox

-- name: outbox_enqueue
-- By ctrlrun_enqueue_outbox (migration 0004), so an agent's role can notify without a write
-- on the table; a row is selected only when the message was new.
SELECT 1 AS changed
FROM {schema}.ctrlrun_enqueue_outbox(
    %(message_id)s::text, %(topic)s::text, %(payload_json)s::text, %(dedupe_key)s::text,
    %(available_at)s::timestamptz
) AS w(ok)
WHERE w.ok;

-- name: outbox_by_key
SELECT * FROM {schema}.outbox WHERE topic = %(topic)s AND dedupe_key = %(dedupe_key)s;

-- name: outbox_get
SELECT * FROM {schema}.outbox WHERE message_id = %(message_id)s;

-- name: outbox_list
SELECT * FROM {schema}.outbox
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
ORDER BY created_at, message_id;

-- name: outbox_lapsed
SELECT * FROM {schema}.outbox
WHERE status = 'processing' AND lease_expires_at < now()
  AND (%(topics_json)s::jsonb IS NULL
       OR topic IN (SELECT jsonb_array_elements_text(%(topics_json)s::jsonb)))
ORDER BY lease_expires_at, message_id
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED;

-- name: outbox_claim
WITH due AS (
    SELECT message_id FROM {schema}.outbox
    WHERE status = 'pending' AND next_attempt_at <= now()
      AND (%(topics_json)s::jsonb IS NULL
           OR topic IN (SELECT jsonb_array_elements_text(%(topics_json)s::jsonb)))
    ORDER BY next_attempt_at, created_at, message_id
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.outbox AS o
SET status = 'processing', attempts = o.attempts + 1,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s::float8),
    claimed_by = %(worker)s, updated_at = now()
FROM due
WHERE o.message_id = due.message_id AND o.status = 'pending'
RETURNING o.*;

-- The fence: only the claim that bumped attempts to %(attempts)s may settle the message.
-- name: outbox_settle
UPDATE {schema}.outbox
SET status = %(status)s::text,
    next_attempt_at = CASE WHEN %(delay_seconds)s::float8 IS NULL THEN next_attempt_at
                           ELSE now() + make_interval(secs => %(delay_seconds)s::float8) END,
    lease_expires_at = NULL, updated_at = now(), last_error = %(error)s::text,
    finished_at = CASE WHEN %(status)s::text IN ('pending', 'ambiguous') THEN NULL
                       ELSE now() END
WHERE message_id = %(message_id)s AND status = 'processing' AND attempts = %(attempts)s;

-- name: outbox_resolve
UPDATE {schema}.outbox
SET status = %(status)s::text, next_attempt_at = now(), updated_at = now(),
    last_error = %(error)s::text,
    finished_at = CASE WHEN %(status)s::text = 'pending' THEN NULL ELSE now() END
WHERE message_id = %(message_id)s AND status = %(from_status)s::text
  AND attempts = %(attempts)s;

-- ----------------------------------------------------------------------------------- plans

-- name: plan_insert
INSERT INTO {schema}.plans (plan_id, plan_hash, steps_json, agent, user_name, status,
                            created_at, expires_at)
VALUES (%(plan_id)s, %(plan_hash)s, %(steps_json)s, %(agent)s, %(user_name)s::text, 'pending',
        now(), now() + make_interval(secs => %(ttl_seconds)s::float8));

-- name: plan_get
SELECT * FROM {schema}.plans WHERE plan_id = %(plan_id)s;

-- The row lock every step transaction takes first and holds to its end (the fence's input).
-- name: plan_lock
SELECT * FROM {schema}.plans WHERE plan_id = %(plan_id)s FOR UPDATE;

-- name: plan_list
SELECT * FROM {schema}.plans
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
ORDER BY created_at, plan_id;

-- name: plan_answer
UPDATE {schema}.plans
SET status = %(status)s::text, approver = %(approver)s, answered_at = now(),
    approved_hash = %(approved_hash)s,
    approval_signature = %(signature)s::text, answer_reason = %(reason)s::text
WHERE plan_id = %(plan_id)s AND status = 'pending' AND plan_hash = %(plan_hash)s
  AND expires_at >= now();

-- name: plan_expire
UPDATE {schema}.plans SET status = 'expired', finished_at = now()
WHERE plan_id = %(plan_id)s AND status = %(from_status)s::text AND started_at IS NULL;

-- name: plan_claim
UPDATE {schema}.plans
SET status = 'executing', claim_epoch = claim_epoch + 1, claimed_by = %(worker)s,
    heartbeat_expires_at = now() + make_interval(secs => %(heartbeat_seconds)s::float8),
    started_at = COALESCE(started_at, now())
WHERE plan_id = %(plan_id)s AND status = 'approved' AND claim_epoch = %(epoch)s
  AND approved_hash = %(plan_hash)s AND (started_at IS NOT NULL OR expires_at >= now());

-- name: plan_heal
UPDATE {schema}.plans
SET status = 'approved', claimed_by = NULL, heartbeat_expires_at = NULL,
    interruptions = interruptions + 1, error = %(error)s::text
WHERE plan_id = %(plan_id)s AND status = 'executing' AND claim_epoch = %(epoch)s
  AND heartbeat_expires_at < now();

-- name: plan_advance
UPDATE {schema}.plans
SET next_step = %(next_step)s,
    heartbeat_expires_at = now() + make_interval(secs => %(heartbeat_seconds)s::float8)
WHERE plan_id = %(plan_id)s AND status = 'executing' AND claim_epoch = %(epoch)s
  AND claimed_by = %(worker)s;

-- name: plan_finish
UPDATE {schema}.plans
SET status = %(status)s::text, finished_at = now(), heartbeat_expires_at = NULL,
    error = %(error)s::text
WHERE plan_id = %(plan_id)s AND status = 'executing' AND claim_epoch = %(epoch)s
  AND claimed_by = %(worker)s;

-- The row comes back as stored (its created_at is the server's on Postgres).
-- name: plan_step_insert
INSERT INTO {schema}.plan_steps (plan_id, step_index, action, result, output_json, error,
                                 effect_key, claim_epoch, receipt_id, created_at)
VALUES (%(plan_id)s, %(step_index)s, %(action)s, %(result)s, %(output_json)s::text,
        %(error)s::text, %(effect_key)s::text, %(claim_epoch)s, %(receipt_id)s, now())
RETURNING *;

-- name: plan_step_list
SELECT * FROM {schema}.plan_steps WHERE plan_id = %(plan_id)s ORDER BY step_index;

-- One position's receipt, by its primary key (never the whole list: a step's cost must not
-- grow with the plan's length).
-- name: plan_step_get
SELECT * FROM {schema}.plan_steps
WHERE plan_id = %(plan_id)s AND step_index = %(step_index)s;

-- ------------------------------------------------------------------------------ operations

-- name: op_insert
INSERT INTO {schema}.operations (operation_id, kind, resource, arguments_json,
                                 idempotency_key, status, created_at, updated_at)
VALUES (%(operation_id)s, %(kind)s, %(resource)s, %(arguments_json)s,
        %(idempotency_key)s::text, 'queued', now(), now())
ON CONFLICT DO NOTHING;

-- name: op_get
SELECT * FROM {schema}.operations WHERE operation_id = %(operation_id)s;

-- name: op_by_key
SELECT * FROM {schema}.operations WHERE idempotency_key = %(idempotency_key)s;

-- name: op_in_flight
SELECT * FROM {schema}.operations
WHERE resource = %(resource)s AND status IN ('queued', 'running');

-- name: op_list
SELECT * FROM {schema}.operations
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
ORDER BY created_at, operation_id;

-- The only door to the remote start: queued -> running happens once per operation.
-- name: op_claim_start
UPDATE {schema}.operations
SET status = 'running', claim_epoch = claim_epoch + 1, claimed_by = %(worker)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s::float8),
    started_at = now(), updated_at = now()
WHERE operation_id = %(operation_id)s AND status = 'queued' AND claim_epoch = %(epoch)s;

-- name: op_claim_poll
UPDATE {schema}.operations
SET claim_epoch = claim_epoch + 1, claimed_by = %(worker)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s::float8),
    polls = polls + 1, updated_at = now()
WHERE operation_id = %(operation_id)s AND status = 'running' AND claim_epoch = %(epoch)s
  AND (lease_expires_at IS NULL OR lease_expires_at < now() OR claimed_by = %(worker)s);

-- Records the remote id and releases the start's claim: from here on it is only polled.
-- name: op_record_start
UPDATE {schema}.operations
SET remote_id = %(remote_id)s, reconcile = NULL, updated_at = now(), claimed_by = NULL,
    lease_expires_at = NULL
WHERE operation_id = %(operation_id)s AND status = 'running' AND claim_epoch = %(epoch)s
  AND claimed_by = %(worker)s AND remote_id IS NULL;

-- An unknown start: flagged for reconciliation and released, so a poller may look for it.
-- name: op_flag
UPDATE {schema}.operations
SET reconcile = %(reconcile)s::text, error = %(error)s::text, updated_at = now(),
    claimed_by = NULL, lease_expires_at = NULL
WHERE operation_id = %(operation_id)s AND status = 'running' AND claim_epoch = %(epoch)s
  AND remote_id IS NULL;

-- name: op_release
UPDATE {schema}.operations
SET claimed_by = NULL, lease_expires_at = NULL, updated_at = now(),
    remote_id = COALESCE(remote_id, %(remote_id)s::text),
    reconcile = CASE WHEN %(remote_id)s::text IS NULL THEN reconcile ELSE NULL END
WHERE operation_id = %(operation_id)s AND status = 'running' AND claim_epoch = %(epoch)s
  AND claimed_by = %(worker)s;

-- name: op_settle
UPDATE {schema}.operations
SET status = %(status)s::text, finished_at = now(), updated_at = now(),
    lease_expires_at = NULL, result_json = %(result_json)s::text, error = %(error)s::text,
    reconcile = NULL, remote_id = COALESCE(remote_id, %(remote_id)s::text)
WHERE operation_id = %(operation_id)s AND status = 'running' AND claim_epoch = %(epoch)s
  AND claimed_by = %(worker)s;

-- name: op_abandoned
SELECT * FROM {schema}.operations
WHERE status = 'running' AND lease_expires_at < now()
ORDER BY lease_expires_at, operation_id
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED;

-- Reaping never restarts: it only drops a dead claim (and flags an unknown start).
-- name: op_reap
UPDATE {schema}.operations
SET claimed_by = NULL, lease_expires_at = NULL, updated_at = now(),
    reconcile = COALESCE(%(reconcile)s::text, reconcile),
    error = COALESCE(%(error)s::text, error)
WHERE operation_id = %(operation_id)s AND status = 'running' AND claim_epoch = %(epoch)s
  AND lease_expires_at < now();

-- name: op_cancel
UPDATE {schema}.operations
SET status = 'canceled', finished_at = now(), updated_at = now(), error = %(error)s::text
WHERE operation_id = %(operation_id)s AND status = 'queued';

-- name: op_resolve_start
UPDATE {schema}.operations
SET remote_id = %(remote_id)s::text, status = %(status)s::text, reconcile = NULL,
    updated_at = now(), error = %(error)s::text,
    finished_at = CASE WHEN %(status)s::text = 'running' THEN NULL ELSE now() END
WHERE operation_id = %(operation_id)s AND status = 'running' AND remote_id IS NULL
  AND reconcile IS NOT NULL AND claim_epoch = %(epoch)s;
