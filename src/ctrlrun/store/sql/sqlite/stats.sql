-- `ctrlrun stats`: the rollup of receipts it reads (migration 0009) and the tables it joins.

-- name: stats_mark_get
SELECT seq FROM stats_mark WHERE id = 1;

-- name: stats_mark_lock
-- A refresher's read of the mark (BEGIN IMMEDIATE already holds the write lock).
SELECT seq FROM stats_mark WHERE id = 1;

-- name: stats_mark_set
-- One chain (decision 0029): :partition is always 0.
UPDATE stats_mark SET seq = :seq WHERE id = 1 AND seq = :from_seq;

-- name: stats_unfolded
-- The receipts the mark has not reached, after seq :after, a page at a time in seq order.
SELECT 0 AS partition_id, r.seq, r.document, m.seq AS mark
FROM stats_mark AS m JOIN receipts AS r ON r.seq > m.seq
WHERE m.id = 1 AND r.seq > :after
ORDER BY r.seq LIMIT :page;

-- name: stats_add
INSERT INTO receipt_stats (dimension, bucket, name, decision, result, reason, calls)
VALUES (:dimension, :bucket, :name, :decision, :result, :reason, :calls)
ON CONFLICT (dimension, bucket, name, decision, result, reason)
DO UPDATE SET calls = calls + excluded.calls;

-- name: stats_ambiguous_add
INSERT OR IGNORE INTO stats_ambiguous (effect_key, attempt, opened_at)
VALUES (:effect_key, :attempt, :opened_at);

-- name: stats_counts
SELECT name, decision, result, reason, SUM(calls) AS calls FROM receipt_stats
WHERE dimension = :dimension AND bucket >= :since GROUP BY name, decision, result, reason;

-- name: stats_approvals
SELECT status, created_at, expires_at, answered_at FROM approvals WHERE created_at >= :since;

-- name: stats_resolved
SELECT e.resolved_by, e.state, e.updated_at, a.opened_at
FROM effects AS e JOIN stats_ambiguous AS a
  ON a.effect_key = e.effect_key AND a.attempt = e.attempt
WHERE e.resolved_by IS NOT NULL AND e.updated_at >= :since;

-- name: stats_open_ambiguous
SELECT updated_at FROM effects WHERE state = 'ambiguous';
