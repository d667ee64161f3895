-- ctrlrun Postgres schema, 0004: every write a protected call or an answer makes goes through
-- a function of the schema that runs as its owner (SECURITY DEFINER), so an agent's role needs
-- EXECUTE and a few SELECTs and never INSERT, UPDATE or DELETE (decision 0024,
-- docs/postgres.md "Three roles"). {schema} is composed as an identifier.
--
-- Every function here:
-- * pins its search_path to the schema and pg_temp, last (a caller's temporary object can
--   never shadow a table or an operator the body uses), and names its tables with the schema;
-- * takes only what the call supplies and checks in SQL what it may change: a state it may
--   move from and to, a request it may consume (granted, unexpired, for this very hash), a
--   receipt it may append (linked to the locked head and hashed here, never given a seq or
--   a hash); a call outside that raises SQLSTATE CR002 and nothing is written;
-- * answers a conditional write with a boolean (the named queries select a row only when it
--   is true, so the caller's row count means what the UPDATE's did);
-- * loses EXECUTE for PUBLIC in this same transaction: nobody but the owner runs it until
--   `ctrlrun grants` grants it to a role by name.

-- --- the call functions of 0001, now run as the owner, with their moves checked -----------

CREATE OR REPLACE FUNCTION {schema}.ctrlrun_reserve_effect(
    p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text,
    p_now timestamptz, p_lease_mark text, p_mark_row integer, p_events jsonb,
    OUT stamped_at timestamptz
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
DECLARE
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

-- The outcome: only an EXECUTING attempt moves, and only to an outcome; never a resolution.
CREATE OR REPLACE FUNCTION {schema}.ctrlrun_finish_effect(
    p_effect_key text, p_state text, p_lease_expires_at timestamptz, p_result_json text,
    p_error text, p_resolved_by text, p_write_token text, p_from_state text, p_action_id text,
    p_attempt integer, p_now timestamptz, p_events jsonb,
    p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text,
    p_template text, p_seq_mark text, p_prev_mark text,
    OUT seq bigint, OUT document text, OUT hash text
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
    head record;
BEGIN
    IF p_from_state IS DISTINCT FROM 'executing' OR p_resolved_by IS NOT NULL
       OR p_state IS NULL OR p_state NOT IN ('committed', 'failed', 'ambiguous') THEN
        RAISE EXCEPTION 'ctrlrun: an outcome moves an executing attempt to an outcome'
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE {schema}.effects AS f
    SET state = p_state, updated_at = stamped_at, lease_expires_at = p_lease_expires_at,
        result_json = p_result_json, error = p_error, write_token = p_write_token
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

-- A receipt is only ever appended: linked to the locked head and hashed here, so no caller
-- states a seq, a predecessor or a hash, and none moves the head any other way.
ALTER FUNCTION {schema}.ctrlrun_record_receipt(
    timestamptz, jsonb, text, text, text, text, text, text, text
) SECURITY DEFINER SET search_path = {schema}, pg_temp;

ALTER FUNCTION {schema}.ctrlrun_reserve_templated(
    text, text, text, bigint, text, timestamptz, text, integer, jsonb, text, text
) SECURITY DEFINER SET search_path = {schema}, pg_temp;

-- --- the shared path's writes, one function each ------------------------------------------

-- Events, in order, stamped with the transaction's time (p_now, or the server's now()): one
-- jsonb array of [type, action_id, effect_key, approval_id, data_json] rows.
CREATE FUNCTION {schema}.ctrlrun_append_events(p_now timestamptz, p_events jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    INSERT INTO {schema}.events (ts, type, action_id, effect_key, approval_id, data_json)
    SELECT COALESCE(p_now, pg_catalog.now()), e.row ->> 0, e.row ->> 1, e.row ->> 2,
           e.row ->> 3, e.row ->> 4
    FROM pg_catalog.jsonb_array_elements(p_events) WITH ORDINALITY AS e(row, i)
    ORDER BY e.i;
END
$body$;

-- effect_insert: attempt 1 of an absent key, reserved or executing, with a lease.
CREATE FUNCTION {schema}.ctrlrun_insert_effect(
    p_effect_key text, p_state text, p_action_id text, p_attempt integer,
    p_created_at timestamptz, p_updated_at timestamptz, p_lease_expires_at timestamptz,
    p_write_token text
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    IF p_attempt IS NULL OR p_attempt <> 1 OR p_state IS NULL
       OR p_state NOT IN ('reserved', 'executing') OR p_lease_expires_at IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: a new effect is attempt 1, reserved or executing, leased'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO {schema}.effects
        (effect_key, state, action_id, attempt, created_at, updated_at, lease_expires_at,
         write_token)
    VALUES (p_effect_key, p_state, p_action_id, p_attempt, p_created_at, p_updated_at,
            p_lease_expires_at, p_write_token)
    ON CONFLICT (effect_key) DO NOTHING;
    RETURN FOUND;
END
$body$;

-- effect_renew: the next attempt of a FAILED key (and nothing else).
CREATE FUNCTION {schema}.ctrlrun_renew_effect(
    p_effect_key text, p_state text, p_action_id text, p_attempt integer,
    p_updated_at timestamptz, p_lease_expires_at timestamptz, p_write_token text,
    p_from_attempt integer, p_from_action_id text
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    IF p_attempt IS NULL OR p_from_attempt IS NULL OR p_attempt <> p_from_attempt + 1
       OR p_state IS NULL
       OR p_state NOT IN ('reserved', 'executing') OR p_lease_expires_at IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: a renewal is the next attempt, reserved or executing, leased'
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE {schema}.effects AS f
    SET state = p_state, action_id = p_action_id, attempt = p_attempt,
        updated_at = p_updated_at, lease_expires_at = p_lease_expires_at, result_json = NULL,
        error = NULL, resolved_by = NULL, write_token = p_write_token
    WHERE f.effect_key = p_effect_key AND f.state = 'failed' AND f.attempt = p_from_attempt
      AND f.action_id = p_from_action_id;
    RETURN FOUND;
END
$body$;

-- effect_move: the transitions the effect planner makes, and no other. An attempt starts
-- (reserved → executing), ends (executing → an outcome), lapses (reserved or executing →
-- ambiguous); an AMBIGUOUS one is resolved to committed or failed by a named resolver (a
-- person, or a reconcile hook). A COMMITTED or FAILED record never moves here.
CREATE FUNCTION {schema}.ctrlrun_move_effect(
    p_effect_key text, p_state text, p_updated_at timestamptz, p_lease_expires_at timestamptz,
    p_result_json text, p_error text, p_resolved_by text, p_write_token text,
    p_from_state text, p_action_id text, p_attempt integer
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
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
    UPDATE {schema}.effects AS f
    SET state = p_state, updated_at = p_updated_at, lease_expires_at = p_lease_expires_at,
        result_json = p_result_json, error = p_error,
        resolved_by = COALESCE(p_resolved_by, f.resolved_by), write_token = p_write_token
    WHERE f.effect_key = p_effect_key AND f.state = p_from_state AND f.action_id = p_action_id
      AND f.attempt = p_attempt;
    RETURN FOUND;
END
$body$;

-- effect_template_insert: the first template an action's keys are reserved under.
CREATE FUNCTION {schema}.ctrlrun_record_template(
    p_action text, p_template text, p_recorded_at timestamptz
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    INSERT INTO {schema}.effect_templates (action, template, recorded_at, accepted_by)
    VALUES (p_action, p_template, p_recorded_at, NULL)
    ON CONFLICT (action) DO NOTHING;
    RETURN FOUND;
END
$body$;

-- effect_template_accept: an operator's word replaces the template (the operator's role).
CREATE FUNCTION {schema}.ctrlrun_accept_template(
    p_action text, p_template text, p_recorded_at timestamptz, p_accepted_by text
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    IF p_accepted_by IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: an accepted template names who accepted it'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO {schema}.effect_templates (action, template, recorded_at, accepted_by)
    VALUES (p_action, p_template, p_recorded_at, p_accepted_by)
    ON CONFLICT (action) DO UPDATE
    SET template = excluded.template, recorded_at = excluded.recorded_at,
        accepted_by = excluded.accepted_by;
    RETURN FOUND;
END
$body$;

-- --- approvals -----------------------------------------------------------------------------

-- approval_insert: a request is made PENDING, unanswered and unconsumed, whatever is passed.
CREATE FUNCTION {schema}.ctrlrun_request_approval(
    p_approval_id text, p_action_hash text, p_action_json text, p_policy_hash text,
    p_status text, p_created_at timestamptz, p_expires_at timestamptz, p_required integer,
    p_excluded_json text
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    IF p_status IS DISTINCT FROM 'pending' OR p_required IS NULL OR p_required < 1
       OR p_expires_at IS NULL OR p_created_at IS NULL OR p_expires_at <= p_created_at THEN
        RAISE EXCEPTION 'ctrlrun: a new request is pending and expires after it is made'
            USING ERRCODE = 'CR002';
    END IF;
    INSERT INTO {schema}.approvals
        (approval_id, action_hash, action_json, policy_hash, status, created_at, expires_at,
         required, excluded_json)
    VALUES (p_approval_id, p_action_hash, p_action_json, p_policy_hash, 'pending',
            p_created_at, p_expires_at, p_required, p_excluded_json);
    RETURN true;
END
$body$;

-- approval_consume: single use, by the action it was granted for. The request must be
-- GRANTED, unexpired at p_consumed_at, and made for p_action_hash: consuming it for another
-- action, or twice, matches no row.
CREATE FUNCTION {schema}.ctrlrun_consume_approval(
    p_approval_id text, p_action_hash text, p_consumed_at timestamptz, p_consumed_by text
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    UPDATE {schema}.approvals AS a
    SET status = 'consumed', consumed_at = p_consumed_at, consumed_by = p_consumed_by
    WHERE a.approval_id = p_approval_id AND a.status = 'granted'
      AND a.action_hash = p_action_hash AND a.expires_at >= p_consumed_at
      AND p_consumed_by IS NOT NULL;
    RETURN FOUND;
END
$body$;

-- approval_set_status: the one status change anyone may write outside an answer: a PENDING
-- or GRANTED request past its expiry becomes EXPIRED (p_now: the transaction's time).
CREATE FUNCTION {schema}.ctrlrun_expire_approval(
    p_approval_id text, p_status text, p_from_status text, p_now timestamptz
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    IF p_status IS DISTINCT FROM 'expired' OR p_from_status IS NULL
       OR p_from_status NOT IN ('pending', 'granted') THEN
        RAISE EXCEPTION 'ctrlrun: only a pending or granted request expires'
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE {schema}.approvals AS a SET status = 'expired'
    WHERE a.approval_id = p_approval_id AND a.status = p_from_status
      AND a.expires_at < COALESCE(p_now, pg_catalog.now());
    RETURN FOUND;
END
$body$;

-- approval_grant_insert: one approver's grant of a PENDING request (the approver's role).
CREATE FUNCTION {schema}.ctrlrun_grant_approval(
    p_approval_id text, p_approver text, p_granted_at timestamptz, p_signature text
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    PERFORM 1 FROM {schema}.approvals AS a
    WHERE a.approval_id = p_approval_id AND a.status = 'pending';
    IF NOT FOUND OR p_approver IS NULL THEN
        RETURN false;
    END IF;
    INSERT INTO {schema}.approval_grants (approval_id, approver, granted_at, signature)
    VALUES (p_approval_id, p_approver, p_granted_at, p_signature)
    ON CONFLICT (approval_id, approver) DO NOTHING;
    RETURN FOUND;
END
$body$;

-- approval_get_locked: the request, its row locked until the answer's transaction ends, so
-- simultaneous grants are counted one after another (the approver's role: a row lock needs
-- UPDATE on the table, which no role but the owner holds).
CREATE FUNCTION {schema}.ctrlrun_lock_approval(p_approval_id text)
RETURNS SETOF {schema}.approvals
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    RETURN QUERY
    SELECT * FROM {schema}.approvals AS a WHERE a.approval_id = p_approval_id FOR UPDATE;
END
$body$;

-- approval_answer: PENDING → GRANTED or DENIED (the approver's role).
CREATE FUNCTION {schema}.ctrlrun_answer_approval(
    p_approval_id text, p_status text, p_approver text, p_answered_at timestamptz
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('granted', 'denied') OR p_approver IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: an answer grants or denies, and names who answered'
            USING ERRCODE = 'CR002';
    END IF;
    UPDATE {schema}.approvals AS a
    SET status = p_status, approver = p_approver, answered_at = p_answered_at
    WHERE a.approval_id = p_approval_id AND a.status = 'pending';
    RETURN FOUND;
END
$body$;

-- outbox_enqueue: a new PENDING message (a request's notifications, an agent's own
-- messages); deduplicated per topic and key.
CREATE FUNCTION {schema}.ctrlrun_enqueue_outbox(
    p_message_id text, p_topic text, p_payload_json text, p_dedupe_key text,
    p_available_at timestamptz
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
BEGIN
    INSERT INTO {schema}.outbox (message_id, topic, payload_json, dedupe_key, status, attempts,
                                 next_attempt_at, created_at, updated_at)
    VALUES (p_message_id, p_topic, p_payload_json, p_dedupe_key, 'pending', 0,
            COALESCE(p_available_at, pg_catalog.now()), pg_catalog.now(), pg_catalog.now())
    ON CONFLICT (topic, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING;
    RETURN FOUND;
END
$body$;

-- --- nobody but the owner runs any of them until granted by name --------------------------

REVOKE ALL ON FUNCTION
    {schema}.ctrlrun_reserve_effect, {schema}.ctrlrun_reserve_templated,
    {schema}.ctrlrun_finish_effect, {schema}.ctrlrun_record_receipt,
    {schema}.ctrlrun_append_events, {schema}.ctrlrun_insert_effect,
    {schema}.ctrlrun_renew_effect, {schema}.ctrlrun_move_effect,
    {schema}.ctrlrun_record_template, {schema}.ctrlrun_accept_template,
    {schema}.ctrlrun_request_approval, {schema}.ctrlrun_consume_approval,
    {schema}.ctrlrun_expire_approval, {schema}.ctrlrun_grant_approval,
    {schema}.ctrlrun_answer_approval, {schema}.ctrlrun_enqueue_outbox,
    {schema}.ctrlrun_lock_approval
FROM PUBLIC;
