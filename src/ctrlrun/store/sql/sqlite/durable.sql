-- Named queries for durable step execution on SQLite. Parameters are named (:name).
-- Every write runs inside BEGIN IMMEDIATE (the store's transact), which is the lock; every
-- transition is still conditional on the state it leaves and its row count is checked.
-- Timestamps are exact ISO-8601 text (they sort as text); :now is the store's clock reading.

-- ---------------------------------------------------------------------------------- outbox

-- name: outbox_enqueue
INSERT INTO outbox (message_id, topic, payload_json, dedupe_key, status, attempts,
                    next_attempt_at, created_at, updated_at)
VALUES (:message_id, :topic, :payload_json, :dedupe_key, 'pending', 0,
        COALESCE(:available_at, :now), :now, :now)
ON CONFLICT (topic, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING;

-- name: outbox_by_key
SELECT * FROM outbox WHERE topic = :topic AND dedupe_key = :dedupe_key;

-- name: outbox_get
SELECT * FROM outbox WHERE message_id = :message_id;

-- name: outbox_list
SELECT * FROM outbox
WHERE (:status IS NULL OR status = :status)
ORDER BY created_at, message_id;

-- name: outbox_lapsed
SELECT * FROM outbox
WHERE status = 'processing' AND lease_expires_at < :now
  AND (:topics_json IS NULL OR topic IN (SELECT value FROM json_each(:topics_json)))
ORDER BY lease_expires_at, message_id
LIMIT :batch;

-- name: outbox_claim
UPDATE outbox
SET status = 'processing', attempts = attempts + 1, lease_expires_at = :lease_expires_at,
    claimed_by = :worker, updated_at = :now
WHERE message_id IN (
    SELECT message_id FROM outbox
    WHERE status = 'pending' AND next_attempt_at <= :now
      AND (:topics_json IS NULL OR topic IN (SELECT value FROM json_each(:topics_json)))
    ORDER BY next_attempt_at, created_at, message_id
    LIMIT :batch)
RETURNING *;

-- The fence: only the claim that bumped attempts to :attempts may settle the message.
-- name: outbox_settle
UPDATE outbox
SET status = :status, next_attempt_at = COALESCE(:next_attempt_at, next_attempt_at),
    lease_expires_at = NULL, updated_at = :now, last_error = :error,
    finished_at = CASE WHEN :status IN ('pending', 'ambiguous') THEN NULL ELSE :now END
WHERE message_id = :message_id AND status = 'processing' AND attempts = :attempts;

-- name: outbox_resolve
UPDATE outbox
SET status = :status, next_attempt_at = :now, updated_at = :now, last_error = :error,
    finished_at = CASE WHEN :status = 'pending' THEN NULL ELSE :now END
WHERE message_id = :message_id AND status = :from_status AND attempts = :attempts;

-- ----------------------------------------------------------------------------------- plans

-- name: plan_insert
INSERT INTO plans (plan_id, plan_hash, steps_json, agent, user_name, status, created_at,
                   expires_at)
VALUES (:plan_id, :plan_hash, :steps_json, :agent, :user_name, 'pending', :now, :expires_at);

-- name: plan_get
SELECT * FROM plans WHERE plan_id = :plan_id;

-- BEGIN IMMEDIATE already holds the write lock; the read is the fence check's input.
-- name: plan_lock
SELECT * FROM plans WHERE plan_id = :plan_id;

-- name: plan_list
SELECT * FROM plans
WHERE (:status IS NULL OR status = :status)
ORDER BY created_at, plan_id;

-- name: plan_answer
UPDATE plans
SET status = :status, approver = :approver, answered_at = :now, approved_hash = :approved_hash,
    approval_signature = :signature, answer_reason = :reason
WHERE plan_id = :plan_id AND status = 'pending' AND plan_hash = :plan_hash
  AND expires_at >= :now;

-- name: plan_expire
UPDATE plans SET status = 'expired', finished_at = :now
WHERE plan_id = :plan_id AND status = :from_status AND started_at IS NULL;

-- name: plan_claim
UPDATE plans
SET status = 'executing', claim_epoch = claim_epoch + 1, claimed_by = :worker,
    heartbeat_expires_at = :heartbeat_expires_at, started_at = COALESCE(started_at, :now)
WHERE plan_id = :plan_id AND status = 'approved' AND claim_epoch = :epoch
  AND approved_hash = :plan_hash AND (started_at IS NOT NULL OR expires_at >= :now);

-- name: plan_heal
UPDATE plans
SET status = 'approved', claimed_by = NULL, heartbeat_expires_at = NULL,
    interruptions = interruptions + 1, error = :error
WHERE plan_id = :plan_id AND status = 'executing' AND claim_epoch = :epoch
  AND heartbeat_expires_at < :now;

-- name: plan_advance
UPDATE plans
SET next_step = :next_step, heartbeat_expires_at = :heartbeat_expires_at
WHERE plan_id = :plan_id AND status = 'executing' AND claim_epoch = :epoch
  AND claimed_by = :worker;

-- name: plan_finish
UPDATE plans
SET status = :status, finished_at = :now, heartbeat_expires_at = NULL, error = :error
WHERE plan_id = :plan_id AND status = 'executing' AND claim_epoch = :epoch
  AND claimed_by = :worker;

-- The row comes back as stored (its created_at is the server's on Postgres).
-- name: plan_step_insert
INSERT INTO plan_steps (plan_id, step_index, action, result, output_json, error, effect_key,
                        claim_epoch, receipt_id, created_at)
VALUES (:plan_id, :step_index, :action, :result, :output_json, :error, :effect_key,
        :claim_epoch, :receipt_id, :now)
RETURNING *;

-- name: plan_step_list
SELECT * FROM plan_steps WHERE plan_id = :plan_id ORDER BY step_index;

-- One position's receipt, by its primary key (never the whole list: a step's cost must not
-- grow with the plan's length).
-- name: plan_step_get
SELECT * FROM plan_steps WHERE plan_id = :plan_id AND step_index = :step_index;

-- ------------------------------------------------------------------------------ operations

-- name: op_insert
INSERT INTO operations (operation_id, kind, resource, arguments_json, idempotency_key, status,
                        created_at, updated_at)
VALUES (:operation_id, :kind, :resource, :arguments_json, :idempotency_key, 'queued',
        :now, :now)
ON CONFLICT DO NOTHING;

-- name: op_get
SELECT * FROM operations WHERE operation_id = :operation_id;

-- name: op_by_key
SELECT * FROM operations WHERE idempotency_key = :idempotency_key;

-- name: op_in_flight
SELECT * FROM operations WHERE resource = :resource AND status IN ('queued', 'running');

-- name: op_list
SELECT * FROM operations
WHERE (:status IS NULL OR status = :status)
ORDER BY created_at, operation_id;

-- The only door to the remote start: queued -> running happens once per operation.
-- name: op_claim_start
UPDATE operations
SET status = 'running', claim_epoch = claim_epoch + 1, claimed_by = :worker,
    lease_expires_at = :lease_expires_at, started_at = :now, updated_at = :now
WHERE operation_id = :operation_id AND status = 'queued' AND claim_epoch = :epoch;

-- name: op_claim_poll
UPDATE operations
SET claim_epoch = claim_epoch + 1, claimed_by = :worker, lease_expires_at = :lease_expires_at,
    polls = polls + 1, updated_at = :now
WHERE operation_id = :operation_id AND status = 'running' AND claim_epoch = :epoch
  AND (lease_expires_at IS NULL OR lease_expires_at < :now OR claimed_by = :worker);

-- Records the remote id and releases the start's claim: from here on it is only polled.
-- name: op_record_start
UPDATE operations
SET remote_id = :remote_id, reconcile = NULL, updated_at = :now, claimed_by = NULL,
    lease_expires_at = NULL
WHERE operation_id = :operation_id AND status = 'running' AND claim_epoch = :epoch
  AND claimed_by = :worker AND remote_id IS NULL;

-- An unknown start: flagged for reconciliation and released, so a poller may look for it.
-- name: op_flag
UPDATE operations
SET reconcile = :reconcile, error = :error, updated_at = :now, claimed_by = NULL,
    lease_expires_at = NULL
WHERE operation_id = :operation_id AND status = 'running' AND claim_epoch = :epoch
  AND remote_id IS NULL;

-- name: op_release
UPDATE operations
SET claimed_by = NULL, lease_expires_at = NULL, updated_at = :now,
    remote_id = COALESCE(remote_id, :remote_id),
    reconcile = CASE WHEN :remote_id IS NULL THEN reconcile ELSE NULL END
WHERE operation_id = :operation_id AND status = 'running' AND claim_epoch = :epoch
  AND claimed_by = :worker;

-- name: op_settle
UPDATE operations
SET status = :status, finished_at = :now, updated_at = :now, lease_expires_at = NULL,
    result_json = :result_json, error = :error, reconcile = NULL,
    remote_id = COALESCE(remote_id, :remote_id)
WHERE operation_id = :operation_id AND status = 'running' AND claim_epoch = :epoch
  AND claimed_by = :worker;

-- name: op_abandoned
SELECT * FROM operations
WHERE status = 'running' AND lease_expires_at < :now
ORDER BY lease_expires_at, operation_id
LIMIT :batch;

-- Reaping never restarts: it only drops a dead claim (and flags an unknown start).
-- name: op_reap
UPDATE operations
SET claimed_by = NULL, lease_expires_at = NULL, updated_at = :now,
    reconcile = COALESCE(:reconcile, reconcile), error = COALESCE(:error, error)
WHERE operation_id = :operation_id AND status = 'running' AND claim_epoch = :epoch
  AND lease_expires_at < :now;

-- name: op_cancel
UPDATE operations SET status = 'canceled', finished_at = :now, updated_at = :now, error = :error
WHERE operation_id = :operation_id AND status = 'queued';

-- name: op_resolve_start
UPDATE operations
SET remote_id = :remote_id, status = :status, reconcile = NULL, updated_at = :now,
    error = :error, finished_at = CASE WHEN :status = 'running' THEN NULL ELSE :now END
WHERE operation_id = :operation_id AND status = 'running' AND remote_id IS NULL
  AND reconcile IS NOT NULL AND claim_epoch = :epoch;
