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
-- The reservation of an absent key and the transaction's events, by ctrlrun_reserve_templated:
-- the action's remembered effect-key template checked (or recorded, the first time) first,
-- then attempt 1 stamped with the transaction's time and lease (whole microseconds, so the
-- client's sum is the same instant), guarded: a key that exists is answered with the record
-- met (met: JSON, NULL when reserved) and nothing written, so the COMMIT ends an empty
-- transaction; a template that differs raises CR001 and nothing commits. The unique key
-- decides the one winner. Returns the transaction's time. The events are one jsonb array
-- (folded.events_json).
SELECT r.stamped_at AS now, r.met
FROM {schema}.ctrlrun_reserve_templated(
    %(effect_key)s, %(state)s, %(action_id)s, %(lease_us)s, %(write_token)s,
    %(now)s::timestamptz, %(lease_mark)s, %(mark_row)s, %(events)s::jsonb,
    %(action)s, %(template)s
) AS r;

-- name: effect_finish_folded
-- The outcome's whole transaction, by ctrlrun_finish_effect: effect_move
-- stamped with the transaction's time, guarded (a move that matches no row raises CR001 and
-- nothing commits), the events, then the chained receipt linked and hashed on the server (as
-- receipt_append_folded; its parameters carry the prefix r_). Returns the receipt's seq,
-- document and hash.
SELECT a.seq, a.document, a.hash
FROM {schema}.ctrlrun_finish_effect(
    %(effect_key)s, %(state)s, %(lease_expires_at)s::timestamptz, %(result_json)s, %(error)s,
    %(resolved_by)s, %(write_token)s, %(from_state)s, %(action_id)s, %(attempt)s,
    %(now)s::timestamptz, %(events)s::jsonb,
    %(r_receipt_id)s, %(r_action_id)s, %(r_effect_key)s, %(r_result)s, %(r_template)s,
    %(r_seq_mark)s, %(r_prev_mark)s, %(r_partition)s
) AS a;

-- name: receipt_record_folded
-- A chained receipt and its transaction's events, by ctrlrun_record_receipt:
-- the events, then the receipt linked and hashed on the server (as receipt_append_folded; its
-- parameters carry the prefix r_). Returns the receipt's seq, document and hash.
SELECT a.seq, a.document, a.hash
FROM {schema}.ctrlrun_record_receipt(
    %(now)s::timestamptz, %(events)s::jsonb,
    %(r_receipt_id)s, %(r_action_id)s, %(r_effect_key)s, %(r_result)s, %(r_template)s,
    %(r_seq_mark)s, %(r_prev_mark)s, %(r_partition)s
) AS a;

