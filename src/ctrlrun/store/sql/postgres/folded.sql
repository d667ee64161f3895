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
-- The reservation of an absent key and the transaction's events, by ctrlrun_reserve (migration
-- 0005): attempt 1 stamped with the transaction's time and lease (whole microseconds, so the
-- client's sum is the same instant), guarded: a key that exists raises CR001 and nothing
-- commits. The unique key decides the one winner. Returns the transaction's time.
SELECT r.stamped_at AS now
FROM {schema}.ctrlrun_reserve(
    %(effect_key)s, %(state)s, %(action_id)s, %(lease_us)s, %(write_token)s,
    %(now)s::timestamptz, %(lease_mark)s, %(mark_row)s,
    %(e_type)s::text[], %(e_action_id)s::text[], %(e_effect_key)s::text[],
    %(e_approval_id)s::text[], %(e_data)s::text[]
) AS r;

-- name: effect_move_folded
-- effect_move stamped with the transaction's time, and the transaction's events, by
-- ctrlrun_move (migration 0005), guarded: a move that matches no row raises CR001 and the
-- server skips the rest of the message, COMMIT included.
SELECT m.moved
FROM {schema}.ctrlrun_move(
    %(effect_key)s, %(state)s, %(lease_expires_at)s::timestamptz, %(result_json)s, %(error)s,
    %(resolved_by)s, %(write_token)s, %(from_state)s, %(action_id)s, %(attempt)s,
    %(now)s::timestamptz,
    %(e_type)s::text[], %(e_action_id)s::text[], %(e_effect_key)s::text[],
    %(e_approval_id)s::text[], %(e_data)s::text[]
) AS m;

-- name: event_insert_folded
-- A transaction's events in one statement: this head, then one row per event in order (the
-- identity column numbers them in the order of the VALUES list).
INSERT INTO {schema}.events (ts, type, action_id, effect_key, approval_id, data_json) VALUES;

-- name: event_row_folded
(COALESCE(%(now)s::timestamptz, now()), %(type)s, %(action_id)s, %(effect_key)s,
 %(approval_id)s, %(data_json)s);

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
