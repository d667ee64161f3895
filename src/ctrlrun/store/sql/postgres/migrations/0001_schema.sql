-- ctrlrun Postgres schema, baseline: every table, index and function the store uses, as one
-- migration (the eleven that led here were squashed before any release; decision 0019).
-- {schema} is the store's schema, composed as an identifier (never an f-string). Applied in
-- one transaction together with its schema_version row. Functions are CREATE OR REPLACE: a
-- later migration that changes one replaces it in place, and no unused function is left.
--
-- Identity columns are COLLATE "C" (byte comparison: no locale can merge two keys); times are
-- timestamptz; documents, results and JSON are text, so their exact bytes survive (jsonb
-- re-serialises, and a plan's steps and a document's content are hashed as stored). The hot
-- tables (effects, events, receipts) keep only the indexes a write needs (decision 0010): the
-- operator's reads scan.

-- --- protected calls ------------------------------------------------------------------------

CREATE TABLE {schema}.effects (
    effect_key       text COLLATE "C" PRIMARY KEY,
    state            text COLLATE "C" NOT NULL
                     CHECK (state IN ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
    action_id        text COLLATE "C" NOT NULL,
    attempt          integer NOT NULL CHECK (attempt >= 1),
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    lease_expires_at timestamptz,
    result_json      text,
    error            text,
    resolved_by      text COLLATE "C",
    -- a random token every effect write sets: a re-read after a lost COMMIT recognises its own
    -- write by it, never by the action_id (which two attempts can share)
    write_token      text COLLATE "C" NOT NULL
);

-- An action's effect-key template, recorded by the first call that reserves a key for it; a
-- later call rendering the key from another template is refused until an operator accepts
-- the change (decision 0015). accepted_by is NULL for a template recorded by a call.
CREATE TABLE {schema}.effect_templates (
    action      text COLLATE "C" PRIMARY KEY,
    template    text NOT NULL,
    recorded_at timestamptz NOT NULL,
    accepted_by text
);

CREATE TABLE {schema}.approvals (
    approval_id  text COLLATE "C" PRIMARY KEY,
    action_hash  text COLLATE "C" NOT NULL,
    action_json  text NOT NULL,
    policy_hash  text COLLATE "C" NOT NULL,
    status       text COLLATE "C" NOT NULL
                 CHECK (status IN ('pending', 'granted', 'denied', 'expired', 'consumed')),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    approver     text,
    answered_at  timestamptz,
    consumed_at  timestamptz,
    consumed_by  text COLLATE "C",
    -- what the policy said when the request was made: the distinct approvers it needs (its
    -- N-th grant makes it GRANTED) and who may not grant it (the requesting agent and user,
    -- with distinct_from_requester)
    required      integer NOT NULL DEFAULT 1,
    excluded_json text NOT NULL DEFAULT '[]'
);

CREATE INDEX approvals_by_status ON {schema}.approvals (status, created_at);

-- a call that needs an approval first looks for one made for the identical action
CREATE INDEX approvals_by_action ON {schema}.approvals (action_hash);

-- one row per grant: a request needing N distinct approvers is GRANTED by its N-th
CREATE TABLE {schema}.approval_grants (
    approval_id text COLLATE "C" NOT NULL,
    approver    text COLLATE "C" NOT NULL,
    granted_at  timestamptz NOT NULL,
    signature   text,
    PRIMARY KEY (approval_id, approver)
);

CREATE TABLE {schema}.events (
    event_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts          timestamptz NOT NULL,
    type        text COLLATE "C" NOT NULL,
    action_id   text COLLATE "C",
    effect_key  text COLLATE "C",
    approval_id text COLLATE "C",
    data_json   text NOT NULL
);

-- Keyed by seq, the chain's order, as on SQLite.
CREATE TABLE {schema}.receipts (
    seq        bigint PRIMARY KEY,
    receipt_id text COLLATE "C" NOT NULL,
    action_id  text COLLATE "C" NOT NULL,
    effect_key text COLLATE "C",
    result     text COLLATE "C" NOT NULL,
    document   text NOT NULL,
    hash       text COLLATE "C",
    created_at timestamptz NOT NULL
);

-- the re-read after a lost COMMIT finds its receipt by id (SQLite never looks one up)
CREATE UNIQUE INDEX receipts_by_id ON {schema}.receipts (receipt_id);

-- The chain head: one row, locked first by every receipt write and held across its insert.
CREATE TABLE {schema}.receipt_chain (
    id   integer PRIMARY KEY CHECK (id = 1),
    seq  bigint NOT NULL,
    hash text COLLATE "C" NOT NULL
);

INSERT INTO {schema}.receipt_chain (id, seq, hash)
VALUES (1, 0, 'sha256:0000000000000000000000000000000000000000000000000000000000000000');

-- --- documents -----------------------------------------------------------------------------

-- Versioned documents (compare-and-swap on `version`); content is text, kept byte for byte.
CREATE TABLE {schema}.documents (
    doc_id       text COLLATE "C" PRIMARY KEY,
    kind         text COLLATE "C" NOT NULL,
    version      bigint NOT NULL CHECK (version >= 1),
    content      text NOT NULL,
    content_hash text COLLATE "C" NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    updated_by   text COLLATE "C"
);

-- One row per saved version (creation is version 1): who saved it, when, and its digest.
CREATE TABLE {schema}.document_versions (
    doc_id       text COLLATE "C" NOT NULL REFERENCES {schema}.documents (doc_id),
    version      bigint NOT NULL CHECK (version >= 1),
    content_hash text COLLATE "C" NOT NULL,
    writer       text COLLATE "C",
    saved_at     timestamptz NOT NULL,
    PRIMARY KEY (doc_id, version)
);

-- --- durable steps: the outbox, approved plans and their step receipts, operations ---------

CREATE TABLE {schema}.outbox (
    message_id       text COLLATE "C" PRIMARY KEY,
    topic            text COLLATE "C" NOT NULL,
    payload_json     text NOT NULL,
    dedupe_key       text COLLATE "C",
    status           text NOT NULL
                     CHECK (status IN ('pending', 'processing', 'sent', 'failed', 'dead',
                                       'ambiguous')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL,
    lease_expires_at timestamptz,
    claimed_by       text COLLATE "C",
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    last_error       text
);

CREATE UNIQUE INDEX outbox_dedupe ON {schema}.outbox (topic, dedupe_key)
    WHERE dedupe_key IS NOT NULL;

-- the claim scans only what can be claimed or reclaimed
CREATE INDEX outbox_due ON {schema}.outbox (next_attempt_at) WHERE status = 'pending';

CREATE INDEX outbox_processing ON {schema}.outbox (lease_expires_at)
    WHERE status = 'processing';

CREATE INDEX outbox_by_status ON {schema}.outbox (status, created_at);

CREATE TABLE {schema}.plans (
    plan_id              text COLLATE "C" PRIMARY KEY,
    plan_hash            text COLLATE "C" NOT NULL,
    steps_json           text NOT NULL,
    agent                text NOT NULL,
    user_name            text,
    status               text NOT NULL
                         CHECK (status IN ('pending', 'approved', 'executing', 'executed',
                                           'failed', 'expired', 'rejected')),
    created_at           timestamptz NOT NULL,
    expires_at           timestamptz NOT NULL,
    approver             text,
    answered_at          timestamptz,
    approved_hash        text COLLATE "C",
    claim_epoch          integer NOT NULL DEFAULT 0,
    claimed_by           text COLLATE "C",
    heartbeat_expires_at timestamptz,
    started_at           timestamptz,
    finished_at          timestamptz,
    next_step            integer NOT NULL DEFAULT 0,
    interruptions        integer NOT NULL DEFAULT 0,
    error                text,
    approval_signature   text
);

CREATE INDEX plans_by_status ON {schema}.plans (status, created_at);

CREATE TABLE {schema}.plan_steps (
    plan_id     text COLLATE "C" NOT NULL REFERENCES {schema}.plans (plan_id),
    step_index  integer NOT NULL CHECK (step_index >= 0),
    action      text NOT NULL,
    result      text NOT NULL CHECK (result IN ('ok', 'failed', 'ambiguous')),
    output_json text,
    error       text,
    effect_key  text COLLATE "C",
    claim_epoch integer NOT NULL,
    receipt_id  text COLLATE "C" NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (plan_id, step_index)
);

CREATE TABLE {schema}.operations (
    operation_id     text COLLATE "C" PRIMARY KEY,
    kind             text NOT NULL,
    resource         text COLLATE "C" NOT NULL,
    arguments_json   text NOT NULL,
    idempotency_key  text COLLATE "C" UNIQUE,
    status           text NOT NULL
                     CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'canceled')),
    remote_id        text COLLATE "C",
    claim_epoch      integer NOT NULL DEFAULT 0,
    claimed_by       text COLLATE "C",
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    polls            integer NOT NULL DEFAULT 0,
    reconcile        text,
    result_json      text,
    error            text
);

CREATE UNIQUE INDEX operations_in_flight ON {schema}.operations (resource)
    WHERE status IN ('queued', 'running');

CREATE INDEX operations_by_status ON {schema}.operations (status, created_at);

-- --- the protected call's folded transactions, one function call each (decision 0009) ------
--
-- Each function runs its statements in the caller's transaction and decides nothing:
-- * the transaction's events arrive as one jsonb array of [type, action_id, effect_key,
--   approval_id, data_json] rows (JSON null for SQL NULL), inserted in order; data_json is
--   the JSON text exactly as the client rendered it (->> gives it back character for
--   character);
-- * a conditional write that matched no row raises SQLSTATE CR001, so the server skips the
--   rest of the message, COMMIT included: the client sees a failed transaction and re-decides
--   on the shared path;
-- * the chained receipt is the same three statements wherever it appears: the head locked
--   (FOR UPDATE: in read committed the newest head, waiting for any other writer's COMMIT),
--   the receipt inserted linked to it (the client's canonical text with the marks for seq
--   and prev_hash filled in from the head) and hashed (SHA-256 over the text's UTF-8 bytes,
--   what verify_chain recomputes), the head advanced. A missing head raises.
-- Each holds its statements itself: a nested call costs a plan and an executor per call.

-- The reservation (effect_reserve_folded): attempt 1 of an absent key, stamped with the
-- transaction's time (p_now, or the server's now()) and lease (whole microseconds), guarded:
-- a key that exists raises CR001 and nothing commits; then the events, EFFECT_RESERVED's data
-- (the row at p_mark_row, 1-based) naming the lease's expiry in place of p_lease_mark, written
-- as Python's isoformat() writes a UTC time (no fraction when it is whole seconds).
CREATE OR REPLACE FUNCTION {schema}.ctrlrun_reserve_effect(
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
CREATE OR REPLACE FUNCTION {schema}.ctrlrun_finish_effect(
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
CREATE OR REPLACE FUNCTION {schema}.ctrlrun_record_receipt(
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

-- The reservation with the action's effect-key template checked first: a remembered template
-- that differs, or a first record lost to a concurrent one, raises CR001 and nothing commits;
-- the store then runs the shared path, which reads the template and refuses with the reason.
CREATE OR REPLACE FUNCTION {schema}.ctrlrun_reserve_templated(
    p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text,
    p_now timestamptz, p_lease_mark text, p_mark_row integer, p_events jsonb,
    p_action text, p_template text,
    OUT stamped_at timestamptz
)
LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    known text;
BEGIN
    IF p_template IS NOT NULL THEN
        known := (SELECT t.template FROM {schema}.effect_templates AS t
                  WHERE t.action = p_action);
        IF known IS NULL THEN
            INSERT INTO {schema}.effect_templates (action, template, recorded_at, accepted_by)
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
    stamped_at := {schema}.ctrlrun_reserve_effect(
        p_effect_key, p_state, p_action_id, p_lease_us, p_write_token, p_now, p_lease_mark,
        p_mark_row, p_events
    );
END
$body$;
