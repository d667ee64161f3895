-- A duplicate is answered in one transaction, and a committed effect names its receipt
-- (issue 28). The first transaction of a call whose key exists used to fail (CR001) and
-- leave the store to read the record and plan in a second transaction, and a duplicate of a
-- committed effect then searched every receipt for the one that committed it. Now:
-- * the effect keeps the receipt of the attempt that committed it (NULL for one committed
--   before this migration, or by a person's resolution: the receipts are then searched);
-- * the reservation's CR001 carries, as its DETAIL, the record it met (JSON, instants in UTC)
--   and the instant it judged by, so the caller refuses at once when its planner would.
-- Both functions keep their signatures, so their grants stand.

ALTER TABLE {schema}.effects ADD COLUMN committed_receipt_id text COLLATE "C";

CREATE OR REPLACE FUNCTION {schema}.ctrlrun_reserve_effect(
    p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text,
    p_now timestamptz, p_lease_mark text, p_mark_row integer, p_events jsonb,
    OUT stamped_at timestamptz
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
DECLARE
    expiry timestamptz;
    expiry_text text;
    met text;
BEGIN
    IF p_state IS NULL OR p_state NOT IN ('reserved', 'executing') OR p_lease_us IS NULL
       OR p_lease_us <= 0 THEN
        RAISE EXCEPTION 'ctrlrun: a reservation is reserved or executing, with a lease'
            USING ERRCODE = 'CR002';
    END IF;
    stamped_at := COALESCE(p_now, pg_catalog.now());
    expiry := stamped_at + p_lease_us * interval '1 microsecond';
    INSERT INTO {schema}.effects
        (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
         write_token)
    VALUES (p_effect_key, p_state, p_action_id, 1, stamped_at, stamped_at, expiry,
            p_write_token)
    ON CONFLICT (effect_key) DO NOTHING;
    IF NOT FOUND THEN
        -- the record that is there, as committed: the caller refuses from it when its
        -- planner would (no second transaction); anything else it decides anew
        met := (SELECT pg_catalog.json_build_object(
            'state', f.state, 'action_id', f.action_id, 'attempt', f.attempt,
            'created_at', f.created_at AT TIME ZONE 'UTC',
            'updated_at', f.updated_at AT TIME ZONE 'UTC',
            'lease_expires_at', f.lease_expires_at AT TIME ZONE 'UTC',
            'result_json', f.result_json, 'error', f.error, 'resolved_by', f.resolved_by,
            'committed_receipt_id', f.committed_receipt_id,
            'now', stamped_at AT TIME ZONE 'UTC')::text
                FROM {schema}.effects AS f WHERE f.effect_key = p_effect_key);
        RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
            USING ERRCODE = 'CR001', DETAIL = COALESCE(met, '');
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

CREATE OR REPLACE FUNCTION {schema}.ctrlrun_finish_effect(
    p_effect_key text, p_state text, p_lease_expires_at timestamptz, p_result_json text,
    p_error text, p_resolved_by text, p_write_token text, p_from_state text, p_action_id text,
    p_attempt integer, p_now timestamptz, p_events jsonb,
    p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text,
    p_template text, p_seq_mark text, p_prev_mark text, p_partition integer,
    OUT seq bigint, OUT document text, OUT hash text
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
    linked record;
BEGIN
    IF p_from_state IS DISTINCT FROM 'executing' OR p_resolved_by IS NOT NULL
       OR p_state IS NULL OR p_state NOT IN ('committed', 'failed', 'ambiguous') THEN
        RAISE EXCEPTION 'ctrlrun: an outcome moves an executing attempt to an outcome'
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE {schema}.effects AS f
    SET state = p_state, updated_at = stamped_at, lease_expires_at = p_lease_expires_at,
        result_json = p_result_json, error = p_error, write_token = p_write_token,
        committed_receipt_id = CASE WHEN p_state = 'committed' THEN p_receipt_id END
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
    FOR linked IN
        SELECT r.seq, r.document, r.hash FROM {schema}.ctrlrun_link_receipt(
            p_partition, stamped_at, p_receipt_id, p_receipt_action_id, p_receipt_effect_key,
            p_result, p_template, p_seq_mark, p_prev_mark
        ) AS r
    LOOP
        seq := linked.seq;
        document := linked.document;
        hash := linked.hash;
    END LOOP;
END
$body$;
