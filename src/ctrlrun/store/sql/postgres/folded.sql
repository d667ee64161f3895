-- Folded writes: the statements of a protected call's transactions sent in as few messages as
-- the guarantee allows (docs/decisions/0006-postgres-round-trips.md). {schema} is composed as
-- an identifier. Each statement reads the transaction's time as
-- COALESCE(%(now)s::timestamptz, now()): the server's now() — the transaction's start, the
-- same instant a separate SELECT now() after BEGIN returns — unless the store was given a
-- clock, whose reading is then passed in.

-- name: txn_open
BEGIN;

-- name: txn_search_path
SET LOCAL search_path TO {schema};

-- name: effect_reserve_folded
-- The reservation of an absent key, with BEGIN and the COMMIT in one message: insert attempt 1
-- stamped with the transaction's time and lease (whole microseconds, so the client's sum is
-- the same instant), guarded: a key that exists raises CR001 and nothing commits. The unique
-- key decides the one winner. The transaction's events travel in the same statement, as a CTE
-- where /*rows*/ stands (event_insert_folded): they fail with it.
WITH t AS (SELECT COALESCE(%(now)s::timestamptz, now()) AS now),
ins AS (
    INSERT INTO {schema}.effects
        (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
         write_token)
    SELECT %(effect_key)s, %(state)s, %(action_id)s, 1, t.now, t.now,
           t.now + %(lease_us)s * interval '1 microsecond', %(write_token)s
    FROM t
    ON CONFLICT (effect_key) DO NOTHING
    RETURNING 1
) /*rows*/
SELECT t.now AS now, {schema}.ctrlrun_expect_one((SELECT count(*) FROM ins)) AS inserted
FROM t;

-- name: effect_move_folded
-- effect_move stamped with the transaction's time, guarded: a move that matches no row raises
-- CR001 and the server skips the rest of the message, COMMIT included. The transaction's events
-- travel in the same statement, as a CTE where /*rows*/ stands.
WITH moved AS (
    UPDATE {schema}.effects
    SET state = %(state)s, updated_at = COALESCE(%(now)s::timestamptz, now()),
        lease_expires_at = %(lease_expires_at)s, result_json = %(result_json)s,
        error = %(error)s, resolved_by = COALESCE(%(resolved_by)s, resolved_by),
        write_token = %(write_token)s
    WHERE effect_key = %(effect_key)s AND state = %(from_state)s AND action_id = %(action_id)s
      AND attempt = %(attempt)s
    RETURNING 1
) /*rows*/
SELECT {schema}.ctrlrun_expect_one((SELECT count(*) FROM moved)) AS moved;

-- name: event_insert_folded
-- A transaction's events in one statement: this head, then one row per event in order (the
-- identity column numbers them in the order of the VALUES list).
INSERT INTO {schema}.events (ts, type, action_id, effect_key, approval_id, data_json) VALUES;

-- name: event_row_folded
(COALESCE(%(now)s::timestamptz, now()), %(type)s, %(action_id)s, %(effect_key)s,
 %(approval_id)s, %(data_json)s);

-- name: event_row_reserved_folded
-- EFFECT_RESERVED, whose data names the lease's expiry: the client rendered the data with a
-- random mark where the time goes, and the server writes the expiry it stamped, formatted as
-- Python's datetime.isoformat() writes a UTC time (no fraction when it is whole seconds).
(COALESCE(%(now)s::timestamptz, now()), %(type)s, %(action_id)s, %(effect_key)s,
 %(approval_id)s,
 replace(%(data_json)s, %(lease_mark)s,
         to_char((COALESCE(%(now)s::timestamptz, now()) + %(lease_us)s * interval '1 microsecond')
                     AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
         || CASE WHEN date_part('microseconds', COALESCE(%(now)s::timestamptz, now())
                                + %(lease_us)s * interval '1 microsecond')::bigint %% 1000000 = 0
                 THEN ''
                 ELSE to_char((COALESCE(%(now)s::timestamptz, now())
                               + %(lease_us)s * interval '1 microsecond') AT TIME ZONE 'UTC',
                              '.US') END
         || '+00:00'));

-- name: receipt_append_folded
-- The chained receipt linked on the server by ctrlrun_append_receipt (migration 0005): the head
-- locked, the receipt linked to it and hashed, the head advanced, in this transaction. The
-- document is the canonical text the client rendered with two random marks standing for seq
-- and prev_hash; the hash is SHA-256 over the stored text's UTF-8 bytes.
SELECT a.seq, a.document, a.hash
FROM {schema}.ctrlrun_append_receipt(
    %(receipt_id)s, %(action_id)s, %(effect_key)s, %(result)s, %(template)s, %(seq_mark)s,
    %(prev_mark)s, %(now)s::timestamptz
) AS a;
