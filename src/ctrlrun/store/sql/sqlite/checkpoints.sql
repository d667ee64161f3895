-- Checkpoints and retention (ctrlrun.checkpoints, docs/checkpoints.md): run by the operator's
-- `ctrlrun checkpoint` and `ctrlrun prune`, never by a protected call.

-- name: checkpoint_insert
INSERT INTO checkpoints (made_at, origin, statement) VALUES (:made_at, :origin, :statement);

-- name: checkpoint_list
SELECT checkpoint_id, made_at, origin, statement FROM checkpoints ORDER BY checkpoint_id;

-- name: anchor_list
SELECT partition_id, seq, hash, statement FROM receipt_anchor ORDER BY partition_id;

-- name: anchor_set
INSERT INTO receipt_anchor (partition_id, seq, hash, statement, anchored_at)
VALUES (:partition_id, :seq, :hash, :statement, :anchored_at)
ON CONFLICT (partition_id) DO UPDATE
SET seq = excluded.seq, hash = excluded.hash, statement = excluded.statement,
    anchored_at = excluded.anchored_at;

-- name: receipt_at
-- One chain (decision 0029): :partition is always 0 here and in the prunes below.
SELECT seq, hash, document FROM receipts WHERE seq = :seq;

-- name: prune_events
-- The events of actions whose every receipt is pruned, older than the checkpoint, except
-- those of an open approval or of an effect (or its action) not yet settled.
DELETE FROM events
WHERE ts < :before
  AND action_id IN (SELECT action_id FROM receipts WHERE seq <= :seq)
  AND action_id NOT IN (SELECT action_id FROM receipts WHERE seq > :seq)
  AND action_id NOT IN
      (SELECT action_id FROM effects WHERE state IN ('reserved', 'executing', 'ambiguous'))
  AND (approval_id IS NULL OR approval_id NOT IN
      (SELECT approval_id FROM approvals WHERE status IN ('pending', 'granted')))
  AND (effect_key IS NULL OR effect_key NOT IN
      (SELECT effect_key FROM effects WHERE state IN ('reserved', 'executing', 'ambiguous')));

-- name: prune_receipts
DELETE FROM receipts WHERE seq <= :seq;
