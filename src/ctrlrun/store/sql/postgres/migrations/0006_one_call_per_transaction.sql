-- ctrlrun Postgres schema: each folded transaction of a protected call is one function call
-- (docs/decisions/0009-one-call-per-transaction.md). {schema} is composed as an identifier.
-- Applied in one transaction together with its schema_version row.
--
-- The functions of migration 0005 stay (nothing of this binary calls them any more). The new
-- ones run the same statements in the same order, in the caller's transaction, and decide
-- nothing; they differ in three ways that make a call cheaper to send and to run:
--
-- * the transaction's events arrive as one jsonb array of [type, action_id, effect_key,
--   approval_id, data_json] rows (JSON null for SQL NULL), inserted in order; data_json is
--   the JSON text exactly as the client rendered it, carried as a JSON string (->> gives it
--   back character for character);
-- * the guard is inline: a conditional write that matched no row raises SQLSTATE CR001 itself
--   (what ctrlrun_expect_one raises), without a nested function call;
-- * the outcome's move, its events and the chained receipt are one call
--   (ctrlrun_finish_effect), and a receipt with its events another (ctrlrun_record_receipt):
--   the chain head is still locked last, after everything else the transaction writes.
--
-- Each function holds its statements itself, as those of migration 0005 do: a nested call
-- costs a plan and an executor per call, and these run at every protected call. The chained
-- receipt is the same three statements wherever it appears: the head locked (FOR UPDATE: in
-- read committed the newest head, waiting for any other writer's COMMIT), the receipt
-- inserted linked to it — the client's canonical text with the marks for seq and prev_hash
-- filled in from the head — and hashed (SHA-256 over the text's UTF-8 bytes, what
-- verify_chain recomputes), the head advanced. A missing head raises and nothing commits.

-- The reservation (effect_reserve_folded): attempt 1 of an absent key, stamped with the
-- transaction's time (p_now, or the server's now()) and lease (whole microseconds), guarded:
-- a key that exists raises CR001 and nothing commits; then the events, EFFECT_RESERVED's data
-- (the row at p_mark_row, 1-based) naming the lease's expiry in place of p_lease_mark, written
-- as Python's isoformat() writes a UTC time (no fraction when it is whole seconds).
CREATE FUNCTION {schema}.ctrlrun_reserve_effect(
    p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text,
    p_now timestamptz, p_lease_mark text, p_mark_row integer, p_events jsonb,
    OUT stamped_at timestamptz
)
LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    expiry timestamptz;
    expiry_text text;
BEGIN
    stamped_at := COALESCE(p_now, pg_catalog.now());
    expiry := stamped_at + p_lease_us * interval '1 microsecond';
    INSERT INTO {schema}.effects
        (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
         write_token)
    VALUES (p_effect_key, p_state, p_action_id, 1, stamped_at, stamped_at, expiry,
            p_write_token)
    ON CONFLICT (effect_key) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
            USING ERRCODE = 'CR001';
    END IF;
    expiry_text := to_char(expiry AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN date_part('microseconds', expiry)::bigint % 1000000 = 0 THEN ''
                ELSE to_char(expiry AT TIME ZONE 'UTC', '.US') END
        || '+00:00';
    INSERT INTO {schema}.events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e.row ->> 0, e.row ->> 1, e.row ->> 2, e.row ->> 3,
           CASE WHEN e.i = p_mark_row THEN replace(e.row ->> 4, p_lease_mark, expiry_text)
                ELSE e.row ->> 4 END
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
END
$body$;

-- The outcome (effect_finish_folded): effect_move's compare-and-set on state, action and
-- attempt, stamped with the transaction's time, guarded (a move that matches no row raises
-- CR001 and nothing commits); then the events; then, last, the chained receipt.
CREATE FUNCTION {schema}.ctrlrun_finish_effect(
    p_effect_key text, p_state text, p_lease_expires_at timestamptz, p_result_json text,
    p_error text, p_resolved_by text, p_write_token text, p_from_state text, p_action_id text,
    p_attempt integer, p_now timestamptz, p_events jsonb,
    p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text,
    p_template text, p_seq_mark text, p_prev_mark text,
    OUT seq bigint, OUT document text, OUT hash text
)
LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
    head record;
BEGIN
    UPDATE {schema}.effects AS f
    SET state = p_state, updated_at = stamped_at, lease_expires_at = p_lease_expires_at,
        result_json = p_result_json, error = p_error,
        resolved_by = COALESCE(p_resolved_by, f.resolved_by), write_token = p_write_token
    WHERE f.effect_key = p_effect_key AND f.state = p_from_state AND f.action_id = p_action_id
      AND f.attempt = p_attempt;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
            USING ERRCODE = 'CR001';
    END IF;
    INSERT INTO {schema}.events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e.row ->> 0, e.row ->> 1, e.row ->> 2, e.row ->> 3, e.row ->> 4
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
    FOR head IN
        SELECT c.seq, c.hash FROM {schema}.receipt_chain AS c WHERE c.id = 1 FOR UPDATE
    LOOP
        seq := head.seq + 1;
        document := replace(replace(p_template, p_seq_mark, seq::text), p_prev_mark, head.hash);
        hash := 'sha256:' || encode(sha256(convert_to(document, 'UTF8')), 'hex');
        INSERT INTO {schema}.receipts
            (receipt_id, seq, action_id, effect_key, result, document, hash, created_at)
        VALUES (p_receipt_id, seq, p_receipt_action_id, p_receipt_effect_key, p_result,
                document, hash, stamped_at);
        UPDATE {schema}.receipt_chain AS c
        SET seq = ctrlrun_finish_effect.seq, hash = ctrlrun_finish_effect.hash
        WHERE c.id = 1;
    END LOOP;
    IF seq IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: the receipt chain has no head row';
    END IF;
END
$body$;

-- A receipt and its transaction's events (receipt_record_folded): the events, then, last, the
-- chained receipt, stamped with the transaction's time (p_now, or the server's now()).
CREATE FUNCTION {schema}.ctrlrun_record_receipt(
    p_now timestamptz, p_events jsonb,
    p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text,
    p_template text, p_seq_mark text, p_prev_mark text,
    OUT seq bigint, OUT document text, OUT hash text
)
LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
    head record;
BEGIN
    INSERT INTO {schema}.events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e.row ->> 0, e.row ->> 1, e.row ->> 2, e.row ->> 3, e.row ->> 4
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
    FOR head IN
        SELECT c.seq, c.hash FROM {schema}.receipt_chain AS c WHERE c.id = 1 FOR UPDATE
    LOOP
        seq := head.seq + 1;
        document := replace(replace(p_template, p_seq_mark, seq::text), p_prev_mark, head.hash);
        hash := 'sha256:' || encode(sha256(convert_to(document, 'UTF8')), 'hex');
        INSERT INTO {schema}.receipts
            (receipt_id, seq, action_id, effect_key, result, document, hash, created_at)
        VALUES (p_receipt_id, seq, p_receipt_action_id, p_receipt_effect_key, p_result,
                document, hash, stamped_at);
        UPDATE {schema}.receipt_chain AS c
        SET seq = ctrlrun_record_receipt.seq, hash = ctrlrun_record_receipt.hash
        WHERE c.id = 1;
    END LOOP;
    IF seq IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: the receipt chain has no head row';
    END IF;
END
$body$;
