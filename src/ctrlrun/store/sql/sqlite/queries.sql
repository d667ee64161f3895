-- Named queries for the SQLite store. Parameters are named (:name).

-- name: effect_get
SELECT effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
       result_json, error, resolved_by, committed_receipt_id
FROM effects WHERE effect_key = :effect_key;

-- name: effect_list
SELECT effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
       result_json, error, resolved_by, committed_receipt_id
FROM effects ORDER BY created_at, effect_key;

-- name: effect_list_by_state
SELECT effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
       result_json, error, resolved_by, committed_receipt_id
FROM effects WHERE state = :state ORDER BY created_at, effect_key;

-- name: effect_insert
INSERT OR IGNORE INTO effects
    (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at)
VALUES
    (:effect_key, :state, :action_id, :attempt, :created_at, :updated_at, :lease_expires_at);

-- name: effect_renew
UPDATE effects
SET state = :state, action_id = :action_id, attempt = :attempt, updated_at = :updated_at,
    lease_expires_at = :lease_expires_at, result_json = NULL, error = NULL, resolved_by = NULL
WHERE effect_key = :effect_key AND state = 'failed' AND attempt = :from_attempt
  AND action_id = :from_action_id;

-- name: effect_move
UPDATE effects
SET state = :state, updated_at = :updated_at, lease_expires_at = :lease_expires_at,
    result_json = :result_json, error = :error, resolved_by = COALESCE(:resolved_by, resolved_by),
    committed_receipt_id = :committed_receipt_id
WHERE effect_key = :effect_key AND state = :from_state AND action_id = :action_id
  AND attempt = :attempt;

-- name: approval_get
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM approvals WHERE approval_id = :approval_id;

-- name: approval_get_locked
-- The request as approval_get reads it; the write transaction already holds SQLite's one
-- write lock, so the grants an answer counts after it are every grant there is.
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM approvals WHERE approval_id = :approval_id;

-- name: approval_list
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM approvals ORDER BY created_at, approval_id;

-- name: approval_list_by_status
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM approvals WHERE status = :status ORDER BY created_at, approval_id;

-- name: approval_find
-- The requests made for one action under one policy, oldest first (0006's index).
SELECT approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
       approver, answered_at, consumed_at, consumed_by, required, excluded_json
FROM approvals WHERE action_hash = :action_hash AND policy_hash = :policy_hash
ORDER BY created_at, approval_id;

-- name: approval_lock
-- Serialises the requests for one action: SQLite's write transaction already does.
SELECT 1 AS locked;

-- name: approval_insert
INSERT INTO approvals
    (approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
     required, excluded_json)
VALUES
    (:approval_id, :action_hash, :action_json, :policy_hash, :status, :created_at, :expires_at,
     :required, :excluded_json);

-- name: approval_grant_insert
INSERT OR IGNORE INTO approval_grants (approval_id, approver, granted_at, signature)
VALUES (:approval_id, :approver, :granted_at, :signature);

-- name: approval_grant_list
SELECT approver, granted_at, signature FROM approval_grants WHERE approval_id = :approval_id
ORDER BY granted_at, approver;

-- name: approval_grant_list_all
-- Every grant of every request, for the verifier (kernel.evidence_check).
SELECT approval_id, approver, granted_at, signature FROM approval_grants
ORDER BY approval_id, granted_at, approver;

-- name: approval_answer
UPDATE approvals SET status = :status, approver = :approver, answered_at = :answered_at
WHERE approval_id = :approval_id AND status = 'pending';

-- name: approval_set_status
UPDATE approvals SET status = :status
WHERE approval_id = :approval_id AND status = :from_status;

-- name: approval_consume
UPDATE approvals SET status = 'consumed', consumed_at = :consumed_at, consumed_by = :consumed_by
WHERE approval_id = :approval_id AND status = 'granted' AND action_hash = :action_hash;

-- name: event_insert
INSERT INTO events (ts, type, action_id, effect_key, approval_id, data_json)
VALUES (:ts, :type, :action_id, :effect_key, :approval_id, :data_json);

-- name: event_list
SELECT event_id, ts, type, action_id, effect_key, approval_id, data_json
FROM events ORDER BY event_id;

-- name: event_list_by_action
SELECT event_id, ts, type, action_id, effect_key, approval_id, data_json
FROM events WHERE action_id = :action_id ORDER BY event_id;

-- name: event_denial_reason
-- The latest denial of one request (its reason, if given): read backwards from the
-- newest event, only on the path of a call a person denied.
SELECT data_json FROM events
WHERE approval_id = :approval_id AND type = 'APPROVAL_DENIED'
ORDER BY event_id DESC LIMIT 1;

-- name: chain_head_lock
-- SQLite keeps one chain (decision 0029): :partition is always 0.
SELECT seq, hash FROM receipt_chain WHERE id = 1;

-- name: chain_head_get
SELECT seq, hash FROM receipt_chain WHERE id = 1;

-- name: chain_heads_get
SELECT 0 AS partition_id, seq, hash FROM receipt_chain WHERE id = 1;

-- name: chain_head_set
UPDATE receipt_chain SET seq = :seq, hash = :hash WHERE id = 1;

-- name: receipt_insert
INSERT INTO receipts (receipt_id, seq, action_id, effect_key, result, document, hash, created_at)
VALUES (:receipt_id, :seq, :action_id, :effect_key, :result, :document, :hash, :created_at);

-- name: receipt_list
SELECT receipt_id, seq, document, hash, 0 AS partition_id FROM receipts
ORDER BY seq IS NULL, seq, created_at;

-- name: receipt_list_verify
SELECT receipt_id, seq, action_id, effect_key, result, document, hash, 0 AS partition_id,
       NULL AS written
FROM receipts
ORDER BY seq IS NULL, seq, created_at;

-- name: receipt_list_by_action
SELECT receipt_id, seq, document, hash, 0 AS partition_id FROM receipts
WHERE action_id = :action_id
ORDER BY seq IS NULL, seq, created_at;

-- name: receipt_page
-- Chained receipts after seq :after recorded at or after :since, a page at a time in seq order
-- (a replay or a report streams them: its memory is one page, whatever the chain's length).
SELECT 0 AS partition_id, seq, document FROM receipts
WHERE seq > :after AND created_at >= :since
ORDER BY seq LIMIT :page;

-- --- effect-key templates (0005) -------------------------------------------------------------

-- name: effect_template_get
SELECT action, template, recorded_at, accepted_by FROM effect_templates WHERE action = :action;

-- name: effect_template_insert
INSERT OR IGNORE INTO effect_templates (action, template, recorded_at, accepted_by)
VALUES (:action, :template, :recorded_at, NULL);

-- name: effect_template_accept
INSERT INTO effect_templates (action, template, recorded_at, accepted_by)
VALUES (:action, :template, :recorded_at, :accepted_by)
ON CONFLICT (action) DO UPDATE
SET template = excluded.template, recorded_at = excluded.recorded_at,
    accepted_by = excluded.accepted_by;

-- name: effect_template_list
SELECT action, template, recorded_at, accepted_by FROM effect_templates ORDER BY action;

-- --- budgets (docs/decisions/0028-budgets.md) ------------------------------------------------

-- name: budget_consume
-- One conditional upsert: the amount is added only while the window stays within the limit
-- (or a person approved going past it); no row back means over budget, nothing written.
INSERT INTO budget_spend (budget_id, window_start, spent)
SELECT :budget_id, :window_start, :amount WHERE :amount <= :limit OR :force
ON CONFLICT (budget_id, window_start) DO UPDATE SET spent = spent + excluded.spent
WHERE budget_spend.spent + excluded.spent <= :limit OR :force
RETURNING spent;

-- name: budget_charge_insert
INSERT INTO budget_charges (action_id, budget_id, window_start, amount, charged_at)
VALUES (:action_id, :budget_id, :window_start, :amount, :charged_at);

-- name: budget_return
-- Give an action's charge back once (the trigger budget_charge_returned takes the amount off
-- its window in the same statement); no row back: nothing was charged or it is back already.
UPDATE budget_charges SET returned_at = :returned_at
WHERE action_id = :action_id AND returned_at IS NULL
RETURNING 1 AS returned;

-- name: budget_spent_get
SELECT spent FROM budget_spend WHERE budget_id = :budget_id AND window_start = :window_start;

-- name: budget_charge_get
SELECT action_id, budget_id, window_start, amount, charged_at, returned_at
FROM budget_charges WHERE action_id = :action_id;

-- name: budget_spend_list
SELECT budget_id, window_start, spent FROM budget_spend ORDER BY budget_id, window_start;

-- name: budget_prune_charges
-- `ctrlrun prune`: charges in windows that ended before the cutoff (a later window of the same
-- budget began by then; windows tumble). Giving one back could no longer change a decision.
DELETE FROM budget_charges
WHERE EXISTS (
    SELECT 1 FROM budget_spend AS later
    WHERE later.budget_id = budget_charges.budget_id
      AND later.window_start > budget_charges.window_start AND later.window_start <= :before
);

-- name: budget_prune_windows
-- The windows themselves, by the same rule: each budget keeps its newest window.
DELETE FROM budget_spend
WHERE EXISTS (
    SELECT 1 FROM budget_spend AS later
    WHERE later.budget_id = budget_spend.budget_id
      AND later.window_start > budget_spend.window_start AND later.window_start <= :before
);
