-- ctrlrun Postgres schema: the chained receipt appended by one function call
-- (docs/decisions/0006-postgres-round-trips.md). {schema} is composed as an identifier.
-- Applied in one transaction together with its schema_version row.
--
-- ctrlrun_append_receipt runs, in order and in the caller's transaction, the three statements
-- the folded outcome used to send itself: lock the chain head (FOR UPDATE: in read committed
-- the newest head, waiting for any other writer's COMMIT), insert the receipt linked to it —
-- the canonical text the client rendered with two random marks standing for seq and
-- prev_hash, filled in from the locked head, and the SHA-256 over its UTF-8 bytes, exactly
-- what verify_chain recomputes — and advance the head to it. Nothing is decided here; it is a
-- function only so that each backend plans those statements once (PL/pgSQL keeps their plans)
-- instead of at every call, without a prepared statement (pgbouncer in transaction mode). A
-- missing head raises and nothing commits.

CREATE FUNCTION {schema}.ctrlrun_append_receipt(
    p_receipt_id text, p_action_id text, p_effect_key text, p_result text, p_template text,
    p_seq_mark text, p_prev_mark text, p_now timestamptz,
    OUT seq bigint, OUT document text, OUT hash text
)
LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    head record;
BEGIN
    FOR head IN
        SELECT c.seq, c.hash FROM {schema}.receipt_chain AS c WHERE c.id = 1 FOR UPDATE
    LOOP
        seq := head.seq + 1;
        document := replace(replace(p_template, p_seq_mark, seq::text), p_prev_mark, head.hash);
        hash := 'sha256:' || encode(sha256(convert_to(document, 'UTF8')), 'hex');
        INSERT INTO {schema}.receipts
            (receipt_id, seq, action_id, effect_key, result, document, hash, created_at)
        VALUES (p_receipt_id, seq, p_action_id, p_effect_key, p_result, document, hash,
                COALESCE(p_now, now()));
        UPDATE {schema}.receipt_chain AS c
        SET seq = ctrlrun_append_receipt.seq, hash = ctrlrun_append_receipt.hash
        WHERE c.id = 1;
    END LOOP;
    IF seq IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: the receipt chain has no head row';
    END IF;
END
$body$;

-- ctrlrun_reserve runs the folded reservation (effect_reserve_folded) in the caller's
-- transaction: insert attempt 1 of an absent key stamped with the transaction's time
-- (p_now, or the server's now()) and lease (whole microseconds), guarded exactly as
-- ctrlrun_expect_one guards it (a key that exists raises CR001 and nothing commits), then the
-- transaction's events in the order given, stamped with the same time. The row at
-- p_mark_row (EFFECT_RESERVED) names the lease's expiry, which only the server knows: its
-- data carries p_lease_mark where the expiry goes, written as Python's isoformat() writes a
-- UTC time (no fraction when it is whole seconds). Nothing is decided here.
CREATE FUNCTION {schema}.ctrlrun_reserve(
    p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text,
    p_now timestamptz, p_lease_mark text, p_mark_row integer,
    e_type text[], e_action_id text[], e_effect_key text[], e_approval_id text[], e_data text[],
    OUT stamped_at timestamptz
)
LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    expiry timestamptz;
    expiry_text text;
    inserted bigint;
BEGIN
    stamped_at := COALESCE(p_now, pg_catalog.now());
    expiry := stamped_at + p_lease_us * interval '1 microsecond';
    INSERT INTO {schema}.effects
        (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
         write_token)
    VALUES (p_effect_key, p_state, p_action_id, 1, stamped_at, stamped_at, expiry,
            p_write_token)
    ON CONFLICT (effect_key) DO NOTHING;
    GET DIAGNOSTICS inserted = ROW_COUNT;
    PERFORM {schema}.ctrlrun_expect_one(inserted);
    expiry_text := to_char(expiry AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN date_part('microseconds', expiry)::bigint % 1000000 = 0 THEN ''
                ELSE to_char(expiry AT TIME ZONE 'UTC', '.US') END
        || '+00:00';
    INSERT INTO {schema}.events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e_type[i], e_action_id[i], e_effect_key[i], e_approval_id[i],
           CASE WHEN i = p_mark_row THEN replace(e_data[i], p_lease_mark, expiry_text)
                ELSE e_data[i] END
    FROM pg_catalog.generate_subscripts(e_type, 1) AS i
    ORDER BY i;
END
$body$;

-- ctrlrun_move runs the folded outcome's move (effect_move_folded) in the caller's
-- transaction: effect_move stamped with the transaction's time (p_now, or the server's
-- now()), the same compare-and-set on state, action and attempt, guarded by ctrlrun_expect_one
-- (a move that matches no row raises CR001 and nothing commits), then the transaction's
-- events in the order given, stamped with the same time. Nothing is decided here.
CREATE FUNCTION {schema}.ctrlrun_move(
    p_effect_key text, p_state text, p_lease_expires_at timestamptz, p_result_json text,
    p_error text, p_resolved_by text, p_write_token text, p_from_state text, p_action_id text,
    p_attempt integer, p_now timestamptz,
    e_type text[], e_action_id text[], e_effect_key text[], e_approval_id text[], e_data text[],
    OUT moved bigint
)
LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
BEGIN
    UPDATE {schema}.effects AS f
    SET state = p_state, updated_at = stamped_at, lease_expires_at = p_lease_expires_at,
        result_json = p_result_json, error = p_error,
        resolved_by = COALESCE(p_resolved_by, f.resolved_by), write_token = p_write_token
    WHERE f.effect_key = p_effect_key AND f.state = p_from_state AND f.action_id = p_action_id
      AND f.attempt = p_attempt;
    GET DIAGNOSTICS moved = ROW_COUNT;
    PERFORM {schema}.ctrlrun_expect_one(moved);
    INSERT INTO {schema}.events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e_type[i], e_action_id[i], e_effect_key[i], e_approval_id[i], e_data[i]
    FROM pg_catalog.generate_subscripts(e_type, 1) AS i
    ORDER BY i;
END
$body$;
