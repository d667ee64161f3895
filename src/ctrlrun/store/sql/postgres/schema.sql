-- The Postgres schema of a store migrated by this ctrlrun: read it to see the schema
-- whole (migrations/ is what creates it). Made by the test that checks it,
-- tests/store/test_schema_artifact.py; CTRLRUN_WRITE_SCHEMA=1 rewrites it.

CREATE SCHEMA {schema};

CREATE FUNCTION {schema}.ctrlrun_accept_template(p_action text, p_template text, p_recorded_at timestamp with time zone, p_accepted_by text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    IF p_accepted_by IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: an accepted template names who accepted it'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO "{schema}".effect_templates (action, template, recorded_at, accepted_by)
    VALUES (p_action, p_template, p_recorded_at, p_accepted_by)
    ON CONFLICT (action) DO UPDATE
    SET template = excluded.template, recorded_at = excluded.recorded_at,
        accepted_by = excluded.accepted_by;
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_answer_approval(p_approval_id text, p_status text, p_approver text, p_answered_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('granted', 'denied') OR p_approver IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: an answer grants or denies, and names who answered'
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE "{schema}".approvals AS a
    SET status = p_status, approver = p_approver, answered_at = p_answered_at
    WHERE a.approval_id = p_approval_id AND a.status = 'pending';
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_append_events(p_now timestamp with time zone, p_events jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO "{schema}".events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT COALESCE(p_now, pg_catalog.now()), e.row ->> 0, e.row ->> 1, e.row ->> 2,
           e.row ->> 3, e.row ->> 4
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_charge_budget(p_action_id text, p_budget_id text, p_window_start timestamp with time zone, p_amount bigint, p_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    IF p_amount IS NULL OR p_amount < 0 OR p_action_id IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: a budget charge names its action and an amount from 0'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO "{schema}".budget_charges (action_id, budget_id, window_start, amount, charged_at)
    VALUES (p_action_id, p_budget_id, p_window_start, p_amount, p_at);
    RETURN true;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_consume_approval(p_approval_id text, p_action_hash text, p_consumed_at timestamp with time zone, p_consumed_by text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    UPDATE "{schema}".approvals AS a
    SET status = 'consumed', consumed_at = p_consumed_at, consumed_by = p_consumed_by
    WHERE a.approval_id = p_approval_id AND a.status = 'granted'
      AND a.action_hash = p_action_hash AND a.expires_at >= p_consumed_at
      AND p_consumed_by IS NOT NULL;
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_consume_budget(p_budget_id text, p_window_start timestamp with time zone, p_amount bigint, p_limit bigint, p_force boolean) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
DECLARE
    v_spent bigint;
BEGIN
    IF p_amount IS NULL OR p_amount < 0 OR p_limit IS NULL OR p_limit < 0
       OR p_budget_id IS NULL OR p_window_start IS NULL OR p_force IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: a budget charge needs a budget, a window and amounts from 0'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO "{schema}".budget_spend AS b (budget_id, window_start, spent)
    SELECT p_budget_id, p_window_start, p_amount WHERE p_amount <= p_limit OR p_force
    ON CONFLICT (budget_id, window_start) DO UPDATE SET spent = b.spent + excluded.spent
    WHERE b.spent + excluded.spent <= p_limit OR p_force;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The row is this transaction's now (written, locked): its spent is the one just set.
    v_spent := (
        SELECT s.spent FROM "{schema}".budget_spend AS s
        WHERE s.budget_id = p_budget_id AND s.window_start = p_window_start
    );
    RETURN v_spent;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_enqueue_outbox(p_message_id text, p_topic text, p_payload_json text, p_dedupe_key text, p_available_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO "{schema}".outbox (message_id, topic, payload_json, dedupe_key, status, attempts,
                                 next_attempt_at, created_at, updated_at)
    VALUES (p_message_id, p_topic, p_payload_json, p_dedupe_key, 'pending', 0,
            COALESCE(p_available_at, pg_catalog.now()), pg_catalog.now(), pg_catalog.now())
    ON CONFLICT (topic, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING;
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_expire_approval(p_approval_id text, p_status text, p_from_status text, p_now timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    IF p_status IS DISTINCT FROM 'expired' OR p_from_status IS NULL
       OR p_from_status NOT IN ('pending', 'granted') THEN
        RAISE EXCEPTION 'ctrlrun: only a pending or granted request expires'
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE "{schema}".approvals AS a SET status = 'expired'
    WHERE a.approval_id = p_approval_id AND a.status = p_from_status
      AND a.expires_at < COALESCE(p_now, pg_catalog.now());
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_finish_effect(p_effect_key text, p_state text, p_lease_expires_at timestamp with time zone, p_result_json text, p_error text, p_resolved_by text, p_write_token text, p_from_state text, p_action_id text, p_attempt integer, p_now timestamp with time zone, p_events jsonb, p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text, p_template text, p_seq_mark text, p_prev_mark text, p_partition integer, OUT seq bigint, OUT document text, OUT hash text) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
    linked record;
BEGIN
    IF p_from_state IS DISTINCT FROM 'executing' OR p_resolved_by IS NOT NULL
       OR p_state IS NULL OR p_state NOT IN ('committed', 'failed', 'ambiguous') THEN
        RAISE EXCEPTION 'ctrlrun: an outcome moves an executing attempt to an outcome'
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE "{schema}".effects AS f
    SET state = p_state, updated_at = stamped_at, lease_expires_at = p_lease_expires_at,
        result_json = p_result_json, error = p_error, write_token = p_write_token,
        committed_receipt_id = CASE WHEN p_state = 'committed' THEN p_receipt_id END
    WHERE f.effect_key = p_effect_key AND f.state = p_from_state AND f.action_id = p_action_id
      AND f.attempt = p_attempt;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
            USING ERRCODE = 'CR001';
    END IF;
    INSERT INTO "{schema}".events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e.row ->> 0, e.row ->> 1, e.row ->> 2, e.row ->> 3, e.row ->> 4
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
    FOR linked IN
        SELECT r.seq, r.document, r.hash FROM "{schema}".ctrlrun_link_receipt(
            p_partition, stamped_at, p_receipt_id, p_receipt_action_id, p_receipt_effect_key,
            p_result, p_template, p_seq_mark, p_prev_mark
        ) AS r
    LOOP
        seq := linked.seq;
        document := linked.document;
        hash := linked.hash;
    END LOOP;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_grant_approval(p_approval_id text, p_approver text, p_granted_at timestamp with time zone, p_signature text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    PERFORM 1 FROM "{schema}".approvals AS a
    WHERE a.approval_id = p_approval_id AND a.status = 'pending';
    IF NOT FOUND OR p_approver IS NULL THEN
        RETURN false;
    END IF;
    INSERT INTO "{schema}".approval_grants (approval_id, approver, granted_at, signature)
    VALUES (p_approval_id, p_approver, p_granted_at, p_signature)
    ON CONFLICT (approval_id, approver) DO NOTHING;
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_insert_effect(p_effect_key text, p_state text, p_action_id text, p_attempt integer, p_created_at timestamp with time zone, p_updated_at timestamp with time zone, p_lease_expires_at timestamp with time zone, p_write_token text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    IF p_attempt IS NULL OR p_attempt <> 1 OR p_state IS NULL
       OR p_state NOT IN ('reserved', 'executing') OR p_lease_expires_at IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: a new effect is attempt 1, reserved or executing, leased'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO "{schema}".effects
        (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
         write_token)
    VALUES (p_effect_key, p_state, p_action_id, p_attempt, p_created_at, p_updated_at,
            p_lease_expires_at, p_write_token)
    ON CONFLICT (effect_key) DO NOTHING;
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_link_receipt(p_partition integer, p_now timestamp with time zone, p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text, p_template text, p_seq_mark text, p_prev_mark text, OUT seq bigint, OUT document text, OUT hash text) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
DECLARE
    head record;
BEGIN
    FOR head IN
        SELECT c.seq, c.hash FROM "{schema}".receipt_chain AS c
        WHERE c.partition_id = p_partition FOR UPDATE
    LOOP
        seq := head.seq + 1;
        document := replace(replace(p_template, p_seq_mark, seq::text), p_prev_mark, head.hash);
        hash := 'sha256:' || encode(sha256(convert_to(document, 'UTF8')), 'hex');
        INSERT INTO "{schema}".receipts
            (partition_id, receipt_id, seq, action_id, effect_key, result, document, hash,
             created_at)
        VALUES (p_partition, p_receipt_id, seq, p_receipt_action_id, p_receipt_effect_key,
                p_result, document, hash, p_now);
        UPDATE "{schema}".receipt_chain AS c
        SET seq = ctrlrun_link_receipt.seq, hash = ctrlrun_link_receipt.hash
        WHERE c.partition_id = p_partition;
    END LOOP;
    IF seq IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: the store keeps no receipt partition %', p_partition
            USING ERRCODE = 'CR002';
    END IF;
END
$$;

CREATE TABLE {schema}.approvals (
    approval_id text NOT NULL COLLATE pg_catalog."C",
    action_hash text NOT NULL COLLATE pg_catalog."C",
    action_json text NOT NULL,
    policy_hash text NOT NULL COLLATE pg_catalog."C",
    status text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    approver text,
    answered_at timestamp with time zone,
    consumed_at timestamp with time zone,
    consumed_by text COLLATE pg_catalog."C",
    required integer DEFAULT 1 NOT NULL,
    excluded_json text DEFAULT '[]'::text NOT NULL,
    CONSTRAINT approvals_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'granted'::text, 'denied'::text, 'expired'::text, 'consumed'::text])))
);

CREATE FUNCTION {schema}.ctrlrun_lock_approval(p_approval_id text) RETURNS SETOF {schema}.approvals
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    SELECT * FROM "{schema}".approvals AS a WHERE a.approval_id = p_approval_id FOR UPDATE;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_move_effect(p_effect_key text, p_state text, p_updated_at timestamp with time zone, p_lease_expires_at timestamp with time zone, p_result_json text, p_error text, p_resolved_by text, p_write_token text, p_from_state text, p_action_id text, p_attempt integer) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    IF NOT COALESCE(
        (p_from_state = 'reserved' AND p_state IN ('executing', 'ambiguous')
            AND p_resolved_by IS NULL)
        OR (p_from_state = 'executing' AND p_state IN ('committed', 'failed', 'ambiguous')
            AND p_resolved_by IS NULL)
        OR (p_from_state = 'ambiguous' AND p_state IN ('committed', 'failed')
            AND p_resolved_by IS NOT NULL),
        false
    ) THEN
        RAISE EXCEPTION 'ctrlrun: an effect does not move from % to %', p_from_state, p_state
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE "{schema}".effects AS f
    SET state = p_state, updated_at = p_updated_at, lease_expires_at = p_lease_expires_at,
        result_json = p_result_json, error = p_error,
        resolved_by = COALESCE(p_resolved_by, f.resolved_by), write_token = p_write_token
    WHERE f.effect_key = p_effect_key AND f.state = p_from_state AND f.action_id = p_action_id
      AND f.attempt = p_attempt;
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_record_receipt(p_now timestamp with time zone, p_events jsonb, p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text, p_template text, p_seq_mark text, p_prev_mark text, p_partition integer, OUT seq bigint, OUT document text, OUT hash text) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
    linked record;
BEGIN
    INSERT INTO "{schema}".events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e.row ->> 0, e.row ->> 1, e.row ->> 2, e.row ->> 3, e.row ->> 4
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
    FOR linked IN
        SELECT r.seq, r.document, r.hash FROM "{schema}".ctrlrun_link_receipt(
            p_partition, stamped_at, p_receipt_id, p_receipt_action_id, p_receipt_effect_key,
            p_result, p_template, p_seq_mark, p_prev_mark
        ) AS r
    LOOP
        seq := linked.seq;
        document := linked.document;
        hash := linked.hash;
    END LOOP;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_record_template(p_action text, p_template text, p_recorded_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO "{schema}".effect_templates (action, template, recorded_at, accepted_by)
    VALUES (p_action, p_template, p_recorded_at, NULL)
    ON CONFLICT (action) DO NOTHING;
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_renew_effect(p_effect_key text, p_state text, p_action_id text, p_attempt integer, p_updated_at timestamp with time zone, p_lease_expires_at timestamp with time zone, p_write_token text, p_from_attempt integer, p_from_action_id text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    IF p_attempt IS NULL OR p_from_attempt IS NULL OR p_attempt <> p_from_attempt + 1
       OR p_state IS NULL
       OR p_state NOT IN ('reserved', 'executing') OR p_lease_expires_at IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: a renewal is the next attempt, reserved or executing, leased'
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE "{schema}".effects AS f
    SET state = p_state, action_id = p_action_id, attempt = p_attempt,
        updated_at = p_updated_at, lease_expires_at = p_lease_expires_at, result_json = NULL,
        error = NULL, resolved_by = NULL, write_token = p_write_token
    WHERE f.effect_key = p_effect_key AND f.state = 'failed' AND f.attempt = p_from_attempt
      AND f.action_id = p_from_action_id;
    RETURN FOUND;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_request_approval(p_approval_id text, p_action_hash text, p_action_json text, p_policy_hash text, p_status text, p_created_at timestamp with time zone, p_expires_at timestamp with time zone, p_required integer, p_excluded_json text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    IF p_status IS DISTINCT FROM 'pending' OR p_required IS NULL OR p_required < 1
       OR p_expires_at IS NULL OR p_created_at IS NULL OR p_expires_at <= p_created_at THEN
        RAISE EXCEPTION 'ctrlrun: a new request is pending and expires after it is made'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO "{schema}".approvals
        (approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
         required, excluded_json)
    VALUES (p_approval_id, p_action_hash, p_action_json, p_policy_hash, 'pending',
            p_created_at, p_expires_at, p_required, p_excluded_json);
    RETURN true;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_reserve_effect(p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text, p_now timestamp with time zone, p_lease_mark text, p_mark_row integer, p_events jsonb, OUT met text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
DECLARE
    stamped_at timestamptz;
    expiry timestamptz;
    expiry_text text;
BEGIN
    IF p_state IS NULL OR p_state NOT IN ('reserved', 'executing') OR p_lease_us IS NULL
       OR p_lease_us <= 0 THEN
        RAISE EXCEPTION 'ctrlrun: a reservation is reserved or executing, with a lease'
            USING ERRCODE = 'CR002';
    END IF;
    stamped_at := COALESCE(p_now, pg_catalog.now());
    expiry := stamped_at + p_lease_us * interval '1 microsecond';
    INSERT INTO "{schema}".effects
        (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
         write_token)
    VALUES (p_effect_key, p_state, p_action_id, 1, stamped_at, stamped_at, expiry,
            p_write_token)
    ON CONFLICT (effect_key) DO NOTHING;
    IF NOT FOUND THEN
        -- the record that is there, as committed, and the instant judged by: the caller
        -- refuses from it when its planner would, and decides anew otherwise. Never NULL
        -- here (a record gone again is answered ''), so NULL means only "reserved".
        met := COALESCE((SELECT pg_catalog.json_build_object(
            'state', f.state, 'action_id', f.action_id, 'attempt', f.attempt,
            'created_at', f.created_at AT TIME ZONE 'UTC',
            'updated_at', f.updated_at AT TIME ZONE 'UTC',
            'lease_expires_at', f.lease_expires_at AT TIME ZONE 'UTC',
            'result_json', f.result_json, 'error', f.error, 'resolved_by', f.resolved_by,
            'committed_receipt_id', f.committed_receipt_id,
            'now', stamped_at AT TIME ZONE 'UTC')::text
                FROM "{schema}".effects AS f WHERE f.effect_key = p_effect_key), '');
        RETURN;
    END IF;
    expiry_text := to_char(expiry AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN date_part('microseconds', expiry)::bigint % 1000000 = 0 THEN ''
                ELSE to_char(expiry AT TIME ZONE 'UTC', '.US') END
        || '+00:00';
    INSERT INTO "{schema}".events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e.row ->> 0, e.row ->> 1, e.row ->> 2, e.row ->> 3,
           CASE WHEN e.i = p_mark_row THEN replace(e.row ->> 4, p_lease_mark, expiry_text)
                ELSE e.row ->> 4 END
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_reserve_templated(p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text, p_now timestamp with time zone, p_lease_mark text, p_mark_row integer, p_events jsonb, p_action text, p_template text, OUT stamped_at timestamp with time zone, OUT met text) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
DECLARE
    known text;
BEGIN
    IF p_template IS NOT NULL THEN
        known := (SELECT t.template FROM "{schema}".effect_templates AS t
                  WHERE t.action = p_action);
        IF known <> p_template THEN
            RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
                USING ERRCODE = 'CR001';
        END IF;
    END IF;
    met := "{schema}".ctrlrun_reserve_effect(
        p_effect_key, p_state, p_action_id, p_lease_us, p_write_token, p_now, p_lease_mark,
        p_mark_row, p_events
    );
    -- the instant ctrlrun_reserve_effect stamped: now() is the transaction's start
    stamped_at := CASE WHEN met IS NULL THEN COALESCE(p_now, pg_catalog.now()) END;
    IF met IS NULL AND p_template IS NOT NULL AND known IS NULL THEN
        INSERT INTO "{schema}".effect_templates (action, template, recorded_at, accepted_by)
        VALUES (p_action, p_template, stamped_at, NULL)
        ON CONFLICT (action) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
                USING ERRCODE = 'CR001';
        END IF;
    END IF;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_return_budget(p_action_id text, p_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '{schema}', 'pg_temp'
    AS $$
BEGIN
    UPDATE "{schema}".budget_charges SET returned_at = p_at
    WHERE action_id = p_action_id AND returned_at IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE "{schema}".budget_spend AS s SET spent = s.spent - c.amount
    FROM "{schema}".budget_charges AS c
    WHERE c.action_id = p_action_id AND s.budget_id = c.budget_id
      AND s.window_start = c.window_start AND s.spent >= c.amount;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ctrlrun: a budget holds less than the charge it gives back'
            USING ERRCODE = 'CR001';
    END IF;
    RETURN true;
END
$$;

CREATE TABLE {schema}.approval_grants (
    approval_id text NOT NULL COLLATE pg_catalog."C",
    approver text NOT NULL COLLATE pg_catalog."C",
    granted_at timestamp with time zone NOT NULL,
    signature text
);

CREATE TABLE {schema}.budget_charges (
    action_id text NOT NULL COLLATE pg_catalog."C",
    budget_id text NOT NULL COLLATE pg_catalog."C",
    window_start timestamp with time zone NOT NULL,
    amount bigint NOT NULL,
    charged_at timestamp with time zone NOT NULL,
    returned_at timestamp with time zone,
    CONSTRAINT budget_charges_amount_check CHECK ((amount >= 0))
);

CREATE TABLE {schema}.budget_spend (
    budget_id text NOT NULL COLLATE pg_catalog."C",
    window_start timestamp with time zone NOT NULL,
    spent bigint NOT NULL,
    CONSTRAINT budget_spend_spent_check CHECK ((spent >= 0))
);

CREATE TABLE {schema}.checkpoints (
    checkpoint_id bigint NOT NULL,
    made_at timestamp with time zone NOT NULL,
    origin text NOT NULL COLLATE pg_catalog."C",
    statement text NOT NULL
);

ALTER TABLE {schema}.checkpoints ALTER COLUMN checkpoint_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME {schema}.checkpoints_checkpoint_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE {schema}.document_versions (
    doc_id text NOT NULL COLLATE pg_catalog."C",
    version bigint NOT NULL,
    content_hash text NOT NULL COLLATE pg_catalog."C",
    writer text COLLATE pg_catalog."C",
    saved_at timestamp with time zone NOT NULL,
    CONSTRAINT document_versions_version_check CHECK ((version >= 1))
);

CREATE TABLE {schema}.documents (
    doc_id text NOT NULL COLLATE pg_catalog."C",
    kind text NOT NULL COLLATE pg_catalog."C",
    version bigint NOT NULL,
    content text NOT NULL,
    content_hash text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    updated_by text COLLATE pg_catalog."C",
    CONSTRAINT documents_version_check CHECK ((version >= 1))
);

CREATE TABLE {schema}.effect_templates (
    action text NOT NULL COLLATE pg_catalog."C",
    template text NOT NULL,
    recorded_at timestamp with time zone NOT NULL,
    accepted_by text
);

CREATE TABLE {schema}.effects (
    effect_key text NOT NULL COLLATE pg_catalog."C",
    state text NOT NULL COLLATE pg_catalog."C",
    action_id text NOT NULL COLLATE pg_catalog."C",
    attempt integer NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    lease_expires_at timestamp with time zone,
    result_json text,
    error text,
    resolved_by text COLLATE pg_catalog."C",
    write_token text NOT NULL COLLATE pg_catalog."C",
    committed_receipt_id text COLLATE pg_catalog."C",
    CONSTRAINT effects_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT effects_state_check CHECK ((state = ANY (ARRAY['reserved'::text, 'executing'::text, 'committed'::text, 'failed'::text, 'ambiguous'::text])))
);

CREATE TABLE {schema}.events (
    event_id bigint NOT NULL,
    ts timestamp with time zone NOT NULL,
    type text NOT NULL COLLATE pg_catalog."C",
    action_id text COLLATE pg_catalog."C",
    effect_key text COLLATE pg_catalog."C",
    approval_id text COLLATE pg_catalog."C",
    data_json text NOT NULL
);

ALTER TABLE {schema}.events ALTER COLUMN event_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME {schema}.events_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE {schema}.operations (
    operation_id text NOT NULL COLLATE pg_catalog."C",
    kind text NOT NULL,
    resource text NOT NULL COLLATE pg_catalog."C",
    arguments_json text NOT NULL,
    idempotency_key text COLLATE pg_catalog."C",
    status text NOT NULL,
    remote_id text COLLATE pg_catalog."C",
    claim_epoch integer DEFAULT 0 NOT NULL,
    claimed_by text COLLATE pg_catalog."C",
    lease_expires_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    polls integer DEFAULT 0 NOT NULL,
    reconcile text,
    result_json text,
    error text,
    CONSTRAINT operations_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'canceled'::text])))
);

CREATE TABLE {schema}.outbox (
    message_id text NOT NULL COLLATE pg_catalog."C",
    topic text NOT NULL COLLATE pg_catalog."C",
    payload_json text NOT NULL,
    dedupe_key text COLLATE pg_catalog."C",
    status text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    lease_expires_at timestamp with time zone,
    claimed_by text COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    last_error text,
    CONSTRAINT outbox_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT outbox_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'processing'::text, 'sent'::text, 'failed'::text, 'dead'::text, 'ambiguous'::text])))
);

CREATE TABLE {schema}.plan_steps (
    plan_id text NOT NULL COLLATE pg_catalog."C",
    step_index integer NOT NULL,
    action text NOT NULL,
    result text NOT NULL,
    output_json text,
    error text,
    effect_key text COLLATE pg_catalog."C",
    claim_epoch integer NOT NULL,
    receipt_id text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    CONSTRAINT plan_steps_result_check CHECK ((result = ANY (ARRAY['ok'::text, 'failed'::text, 'ambiguous'::text]))),
    CONSTRAINT plan_steps_step_index_check CHECK ((step_index >= 0))
);

CREATE TABLE {schema}.plans (
    plan_id text NOT NULL COLLATE pg_catalog."C",
    plan_hash text NOT NULL COLLATE pg_catalog."C",
    steps_json text NOT NULL,
    agent text NOT NULL,
    user_name text,
    status text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    approver text,
    answered_at timestamp with time zone,
    approved_hash text COLLATE pg_catalog."C",
    claim_epoch integer DEFAULT 0 NOT NULL,
    claimed_by text COLLATE pg_catalog."C",
    heartbeat_expires_at timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    next_step integer DEFAULT 0 NOT NULL,
    interruptions integer DEFAULT 0 NOT NULL,
    error text,
    approval_signature text,
    answer_reason text,
    CONSTRAINT plans_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'approved'::text, 'executing'::text, 'executed'::text, 'failed'::text, 'expired'::text, 'rejected'::text])))
);

CREATE TABLE {schema}.receipt_anchor (
    partition_id integer NOT NULL,
    seq bigint NOT NULL,
    hash text NOT NULL COLLATE pg_catalog."C",
    statement text NOT NULL,
    anchored_at timestamp with time zone NOT NULL,
    CONSTRAINT receipt_anchor_partition_id_check CHECK ((partition_id >= 0)),
    CONSTRAINT receipt_anchor_seq_check CHECK ((seq >= 1))
);

CREATE TABLE {schema}.receipt_chain (
    partition_id integer CONSTRAINT receipt_chain_id_not_null NOT NULL,
    seq bigint NOT NULL,
    hash text NOT NULL COLLATE pg_catalog."C",
    CONSTRAINT receipt_chain_partition_id_check CHECK (((partition_id >= 0) AND (partition_id < 4096)))
);

CREATE TABLE {schema}.receipt_stats (
    dimension text NOT NULL COLLATE pg_catalog."C",
    bucket timestamp with time zone NOT NULL,
    name text NOT NULL COLLATE pg_catalog."C",
    decision text NOT NULL COLLATE pg_catalog."C",
    result text NOT NULL COLLATE pg_catalog."C",
    reason text NOT NULL COLLATE pg_catalog."C",
    calls bigint NOT NULL,
    CONSTRAINT receipt_stats_calls_check CHECK ((calls >= 0)),
    CONSTRAINT receipt_stats_dimension_check CHECK ((dimension = ANY (ARRAY['action'::text, 'agent'::text, 'rule'::text])))
);

CREATE TABLE {schema}.receipts (
    seq bigint NOT NULL,
    receipt_id text NOT NULL COLLATE pg_catalog."C",
    action_id text NOT NULL COLLATE pg_catalog."C",
    effect_key text COLLATE pg_catalog."C",
    result text NOT NULL COLLATE pg_catalog."C",
    document text NOT NULL,
    hash text COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    partition_id integer DEFAULT 0 NOT NULL,
    written bigint NOT NULL
);

ALTER TABLE {schema}.receipts ALTER COLUMN written ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME {schema}.receipts_written_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE {schema}.schema_version (
    migration_id text NOT NULL COLLATE pg_catalog."C",
    applied_at timestamp with time zone NOT NULL,
    ctrlrun_version text NOT NULL
);

CREATE TABLE {schema}.stats_ambiguous (
    effect_key text NOT NULL COLLATE pg_catalog."C",
    attempt integer NOT NULL,
    opened_at timestamp with time zone NOT NULL
);

CREATE TABLE {schema}.stats_mark (
    partition_id integer CONSTRAINT stats_mark_id_not_null NOT NULL,
    seq bigint NOT NULL,
    CONSTRAINT stats_mark_partition_id_check CHECK (((partition_id >= 0) AND (partition_id < 4096)))
);

ALTER TABLE ONLY {schema}.approval_grants
    ADD CONSTRAINT approval_grants_pkey PRIMARY KEY (approval_id, approver);

ALTER TABLE ONLY {schema}.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (approval_id);

ALTER TABLE ONLY {schema}.budget_charges
    ADD CONSTRAINT budget_charges_pkey PRIMARY KEY (action_id);

ALTER TABLE ONLY {schema}.budget_spend
    ADD CONSTRAINT budget_spend_pkey PRIMARY KEY (budget_id, window_start);

ALTER TABLE ONLY {schema}.checkpoints
    ADD CONSTRAINT checkpoints_pkey PRIMARY KEY (checkpoint_id);

ALTER TABLE ONLY {schema}.document_versions
    ADD CONSTRAINT document_versions_pkey PRIMARY KEY (doc_id, version);

ALTER TABLE ONLY {schema}.documents
    ADD CONSTRAINT documents_pkey PRIMARY KEY (doc_id);

ALTER TABLE ONLY {schema}.effect_templates
    ADD CONSTRAINT effect_templates_pkey PRIMARY KEY (action);

ALTER TABLE ONLY {schema}.effects
    ADD CONSTRAINT effects_pkey PRIMARY KEY (effect_key);

ALTER TABLE ONLY {schema}.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (event_id);

ALTER TABLE ONLY {schema}.operations
    ADD CONSTRAINT operations_idempotency_key_key UNIQUE (idempotency_key);

ALTER TABLE ONLY {schema}.operations
    ADD CONSTRAINT operations_pkey PRIMARY KEY (operation_id);

ALTER TABLE ONLY {schema}.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (message_id);

ALTER TABLE ONLY {schema}.plan_steps
    ADD CONSTRAINT plan_steps_pkey PRIMARY KEY (plan_id, step_index);

ALTER TABLE ONLY {schema}.plans
    ADD CONSTRAINT plans_pkey PRIMARY KEY (plan_id);

ALTER TABLE ONLY {schema}.receipt_anchor
    ADD CONSTRAINT receipt_anchor_pkey PRIMARY KEY (partition_id);

ALTER TABLE ONLY {schema}.receipt_chain
    ADD CONSTRAINT receipt_chain_pkey PRIMARY KEY (partition_id);

ALTER TABLE ONLY {schema}.receipt_stats
    ADD CONSTRAINT receipt_stats_pkey PRIMARY KEY (dimension, bucket, name, decision, result, reason);

ALTER TABLE ONLY {schema}.receipts
    ADD CONSTRAINT receipts_pkey PRIMARY KEY (partition_id, seq);

ALTER TABLE ONLY {schema}.schema_version
    ADD CONSTRAINT schema_version_pkey PRIMARY KEY (migration_id);

ALTER TABLE ONLY {schema}.stats_ambiguous
    ADD CONSTRAINT stats_ambiguous_pkey PRIMARY KEY (effect_key, attempt);

ALTER TABLE ONLY {schema}.stats_mark
    ADD CONSTRAINT stats_mark_pkey PRIMARY KEY (partition_id);

CREATE INDEX approvals_by_action ON {schema}.approvals USING btree (action_hash);

CREATE INDEX approvals_by_status ON {schema}.approvals USING btree (status, created_at);

CREATE INDEX operations_by_status ON {schema}.operations USING btree (status, created_at);

CREATE UNIQUE INDEX operations_in_flight ON {schema}.operations USING btree (resource) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text]));

CREATE INDEX outbox_by_status ON {schema}.outbox USING btree (status, created_at);

CREATE UNIQUE INDEX outbox_dedupe ON {schema}.outbox USING btree (topic, dedupe_key) WHERE (dedupe_key IS NOT NULL);

CREATE INDEX outbox_due ON {schema}.outbox USING btree (next_attempt_at) WHERE (status = 'pending'::text);

CREATE INDEX outbox_processing ON {schema}.outbox USING btree (lease_expires_at) WHERE (status = 'processing'::text);

CREATE INDEX plans_by_status ON {schema}.plans USING btree (status, created_at);

CREATE UNIQUE INDEX receipts_by_id ON {schema}.receipts USING btree (receipt_id);

ALTER TABLE ONLY {schema}.document_versions
    ADD CONSTRAINT document_versions_doc_id_fkey FOREIGN KEY (doc_id) REFERENCES {schema}.documents(doc_id);

ALTER TABLE ONLY {schema}.plan_steps
    ADD CONSTRAINT plan_steps_plan_id_fkey FOREIGN KEY (plan_id) REFERENCES {schema}.plans(plan_id);
