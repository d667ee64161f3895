-- Checkpoints and retention (ctrlrun.checkpoints, docs/checkpoints.md): run by the operator's
-- `ctrlrun checkpoint` and `ctrlrun prune`, never by a protected call.

-- name: checkpoint_insert
INSERT INTO {schema}.checkpoints (made_at, origin, statement)
VALUES (%(made_at)s, %(origin)s, %(statement)s);

-- name: checkpoint_list
SELECT checkpoint_id, made_at, origin, statement FROM {schema}.checkpoints ORDER BY checkpoint_id;

-- name: anchor_list
SELECT partition_id, seq, hash, statement FROM {schema}.receipt_anchor ORDER BY partition_id;

-- name: anchor_set
INSERT INTO {schema}.receipt_anchor (partition_id, seq, hash, statement, anchored_at)
VALUES (%(partition_id)s, %(seq)s, %(hash)s, %(statement)s, %(anchored_at)s)
ON CONFLICT (partition_id) DO UPDATE
SET seq = excluded.seq, hash = excluded.hash, statement = excluded.statement,
    anchored_at = excluded.anchored_at;

-- name: receipt_at
SELECT seq, hash, document FROM {schema}.receipts
WHERE partition_id = %(partition)s AND seq = %(seq)s;

-- name: prune_events
-- The events of actions whose every receipt is pruned (one chain at a time: the partition up
-- to the seq given), older than the checkpoint, except
-- those of an open approval or of an effect (or its action) not yet settled.
DELETE FROM {schema}.events
WHERE ts < %(before)s
  AND action_id IN
      (SELECT action_id FROM {schema}.receipts
       WHERE partition_id = %(partition)s AND seq <= %(seq)s)
  AND action_id NOT IN
      (SELECT action_id FROM {schema}.receipts
       WHERE partition_id <> %(partition)s OR seq > %(seq)s)
  AND action_id NOT IN
      (SELECT action_id FROM {schema}.effects
       WHERE state IN ('reserved', 'executing', 'ambiguous'))
  AND (approval_id IS NULL OR approval_id NOT IN
      (SELECT approval_id FROM {schema}.approvals WHERE status IN ('pending', 'granted')))
  AND (effect_key IS NULL OR effect_key NOT IN
      (SELECT effect_key FROM {schema}.effects
       WHERE state IN ('reserved', 'executing', 'ambiguous')));

-- name: prune_receipts
DELETE FROM {schema}.receipts WHERE partition_id = %(partition)s AND seq <= %(seq)s;
