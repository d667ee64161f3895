-- `ctrlrun stats`: the rollup of receipts it reads (migration 0002) and the tables it joins.

-- name: stats_mark_get
SELECT seq FROM {schema}.stats_mark WHERE partition_id = 0;

-- name: stats_mark_lock
-- A refresher holds partition 0's mark until it commits: a second one waits, then folds what
-- follows.
SELECT seq FROM {schema}.stats_mark WHERE partition_id = 0 FOR UPDATE;

-- name: stats_mark_set
UPDATE {schema}.stats_mark SET seq = %(seq)s
WHERE partition_id = %(partition)s AND seq = %(from_seq)s;

-- name: stats_unfolded
-- The receipts each chain's mark has not reached, after the (partition, seq) given, a page at
-- a time in (partition, seq) order, each with its chain's mark.
SELECT r.partition_id, r.seq, r.document, m.seq AS mark
FROM {schema}.stats_mark AS m
JOIN {schema}.receipts AS r ON r.partition_id = m.partition_id AND r.seq > m.seq
WHERE (r.partition_id, r.seq) > (%(after_partition)s, %(after)s)
ORDER BY r.partition_id, r.seq LIMIT %(page)s;

-- name: stats_add
INSERT INTO {schema}.receipt_stats AS s
    (dimension, bucket, name, decision, result, reason, calls)
VALUES (%(dimension)s, %(bucket)s, %(name)s, %(decision)s, %(result)s, %(reason)s, %(calls)s)
ON CONFLICT (dimension, bucket, name, decision, result, reason)
DO UPDATE SET calls = s.calls + excluded.calls;

-- name: stats_ambiguous_add
INSERT INTO {schema}.stats_ambiguous (effect_key, attempt, opened_at)
VALUES (%(effect_key)s, %(attempt)s, %(opened_at)s)
ON CONFLICT (effect_key, attempt) DO NOTHING;

-- name: stats_counts
SELECT name, decision, result, reason, SUM(calls) AS calls FROM {schema}.receipt_stats
WHERE dimension = %(dimension)s AND bucket >= %(since)s GROUP BY name, decision, result, reason;

-- name: stats_approvals
SELECT status, created_at, expires_at, answered_at FROM {schema}.approvals WHERE created_at >= %(since)s;

-- name: stats_resolved
SELECT e.resolved_by, e.state, e.updated_at, a.opened_at
FROM {schema}.effects AS e JOIN {schema}.stats_ambiguous AS a
  ON a.effect_key = e.effect_key AND a.attempt = e.attempt
WHERE e.resolved_by IS NOT NULL AND e.updated_at >= %(since)s;

-- name: stats_open_ambiguous
SELECT updated_at FROM {schema}.effects WHERE state = 'ambiguous';
