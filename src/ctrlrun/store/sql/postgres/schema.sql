-- The Postgres schema of a store migrated by this ctrlrun: read it to see the schema
-- whole (migrations/ is what creates it). Made by the test that checks it,
-- tests/store/test_schema_artifact.py; CTRLRUN_WRITE_SCHEMA=1 rewrites it.

CREATE SCHEMA {schema};

CREATE FUNCTION {schema}.ctrlrun_finish_effect(p_effect_key text, p_state text, p_lease_expires_at timestamp with time zone, p_result_json text, p_error text, p_resolved_by text, p_write_token text, p_from_state text, p_action_id text, p_attempt integer, p_now timestamp with time zone, p_events jsonb, p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text, p_template text, p_seq_mark text, p_prev_mark text, OUT seq bigint, OUT document text, OUT hash text) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
    head record;
BEGIN
    UPDATE "{schema}".effects AS f
    SET state = p_state, updated_at = stamped_at, lease_expires_at = p_lease_expires_at,
        result_json = p_result_json, error = p_error,
        resolved_by = COALESCE(p_resolved_by, f.resolved_by), write_token = p_write_token
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
    FOR head IN
        SELECT c.seq, c.hash FROM "{schema}".receipt_chain AS c WHERE c.id = 1 FOR UPDATE
    LOOP
        seq := head.seq + 1;
        document := replace(replace(p_template, p_seq_mark, seq::text), p_prev_mark, head.hash);
        hash := 'sha256:' || encode(sha256(convert_to(document, 'UTF8')), 'hex');
        INSERT INTO "{schema}".receipts
            (receipt_id, seq, action_id, effect_key, result, document, hash, created_at)
        VALUES (p_receipt_id, seq, p_receipt_action_id, p_receipt_effect_key, p_result,
                document, hash, stamped_at);
        UPDATE "{schema}".receipt_chain AS c
        SET seq = ctrlrun_finish_effect.seq, hash = ctrlrun_finish_effect.hash
        WHERE c.id = 1;
    END LOOP;
    IF seq IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: the receipt chain has no head row';
    END IF;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_record_receipt(p_now timestamp with time zone, p_events jsonb, p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text, p_template text, p_seq_mark text, p_prev_mark text, OUT seq bigint, OUT document text, OUT hash text) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
    head record;
BEGIN
    INSERT INTO "{schema}".events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e.row ->> 0, e.row ->> 1, e.row ->> 2, e.row ->> 3, e.row ->> 4
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
    FOR head IN
        SELECT c.seq, c.hash FROM "{schema}".receipt_chain AS c WHERE c.id = 1 FOR UPDATE
    LOOP
        seq := head.seq + 1;
        document := replace(replace(p_template, p_seq_mark, seq::text), p_prev_mark, head.hash);
        hash := 'sha256:' || encode(sha256(convert_to(document, 'UTF8')), 'hex');
        INSERT INTO "{schema}".receipts
            (receipt_id, seq, action_id, effect_key, result, document, hash, created_at)
        VALUES (p_receipt_id, seq, p_receipt_action_id, p_receipt_effect_key, p_result,
                document, hash, stamped_at);
        UPDATE "{schema}".receipt_chain AS c
        SET seq = ctrlrun_record_receipt.seq, hash = ctrlrun_record_receipt.hash
        WHERE c.id = 1;
    END LOOP;
    IF seq IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: the receipt chain has no head row';
    END IF;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_reserve_effect(p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text, p_now timestamp with time zone, p_lease_mark text, p_mark_row integer, p_events jsonb, OUT stamped_at timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    AS $$
DECLARE
    expiry timestamptz;
    expiry_text text;
BEGIN
    stamped_at := COALESCE(p_now, pg_catalog.now());
    expiry := stamped_at + p_lease_us * interval '1 microsecond';
    INSERT INTO "{schema}".effects
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
    INSERT INTO "{schema}".events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT stamped_at, e.row ->> 0, e.row ->> 1, e.row ->> 2, e.row ->> 3,
           CASE WHEN e.i = p_mark_row THEN replace(e.row ->> 4, p_lease_mark, expiry_text)
                ELSE e.row ->> 4 END
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
END
$$;

CREATE FUNCTION {schema}.ctrlrun_reserve_templated(p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text, p_now timestamp with time zone, p_lease_mark text, p_mark_row integer, p_events jsonb, p_action text, p_template text, OUT stamped_at timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    AS $$
DECLARE
    known text;
BEGIN
    IF p_template IS NOT NULL THEN
        known := (SELECT t.template FROM "{schema}".effect_templates AS t
                  WHERE t.action = p_action);
        IF known IS NULL THEN
            INSERT INTO "{schema}".effect_templates (action, template, recorded_at, accepted_by)
            VALUES (p_action, p_template, COALESCE(p_now, pg_catalog.now()), NULL)
            ON CONFLICT (action) DO NOTHING;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
                    USING ERRCODE = 'CR001';
            END IF;
        ELSIF known <> p_template THEN
            RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
                USING ERRCODE = 'CR001';
        END IF;
    END IF;
    stamped_at := "{schema}".ctrlrun_reserve_effect(
        p_effect_key, p_state, p_action_id, p_lease_us, p_write_token, p_now, p_lease_mark,
        p_mark_row, p_events
    );
END
$$;

CREATE TABLE {schema}.approval_grants (
    approval_id text NOT NULL COLLATE pg_catalog."C",
    approver text NOT NULL COLLATE pg_catalog."C",
    granted_at timestamp with time zone NOT NULL,
    signature text
);

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
    id integer NOT NULL,
    seq bigint NOT NULL,
    hash text NOT NULL COLLATE pg_catalog."C",
    CONSTRAINT receipt_chain_id_check CHECK ((id = 1))
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
    created_at timestamp with time zone NOT NULL
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
    id integer NOT NULL,
    seq bigint NOT NULL,
    CONSTRAINT stats_mark_id_check CHECK ((id = 1))
);

ALTER TABLE ONLY {schema}.approval_grants
    ADD CONSTRAINT approval_grants_pkey PRIMARY KEY (approval_id, approver);

ALTER TABLE ONLY {schema}.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (approval_id);

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
    ADD CONSTRAINT receipt_chain_pkey PRIMARY KEY (id);

ALTER TABLE ONLY {schema}.receipt_stats
    ADD CONSTRAINT receipt_stats_pkey PRIMARY KEY (dimension, bucket, name, decision, result, reason);

ALTER TABLE ONLY {schema}.receipts
    ADD CONSTRAINT receipts_pkey PRIMARY KEY (seq);

ALTER TABLE ONLY {schema}.schema_version
    ADD CONSTRAINT schema_version_pkey PRIMARY KEY (migration_id);

ALTER TABLE ONLY {schema}.stats_ambiguous
    ADD CONSTRAINT stats_ambiguous_pkey PRIMARY KEY (effect_key, attempt);

ALTER TABLE ONLY {schema}.stats_mark
    ADD CONSTRAINT stats_mark_pkey PRIMARY KEY (id);

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
