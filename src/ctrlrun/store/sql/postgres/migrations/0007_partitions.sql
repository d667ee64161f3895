-- Partitioned receipt chains (docs/decisions/0029-partitioned-chains.md, issue 28): a fixed
-- number of chains, each with its own head row, so two calls for different effects never
-- queue on one row. The old single chain becomes partition 0's history unchanged (its
-- documents state no partition: partition 0).
--
-- The count is chosen when the store is created: {partitions} is the literal count the opener
-- composes in (ctrlrun init --partitions N; Postgres stores default to 64). A store that
-- already holds receipts keeps one chain; the count never changes afterwards.

ALTER TABLE {schema}.receipt_chain DROP CONSTRAINT receipt_chain_id_check;
ALTER TABLE {schema}.receipt_chain RENAME COLUMN id TO partition_id;
UPDATE {schema}.receipt_chain SET partition_id = 0;
ALTER TABLE {schema}.receipt_chain ADD CONSTRAINT receipt_chain_partition_id_check
    CHECK (partition_id >= 0 AND partition_id < 4096);

ALTER TABLE {schema}.receipts ADD COLUMN partition_id integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.receipts DROP CONSTRAINT receipts_pkey;
ALTER TABLE {schema}.receipts ADD CONSTRAINT receipts_pkey PRIMARY KEY (partition_id, seq);

-- `ctrlrun stats` folds each chain up to its own mark.
ALTER TABLE {schema}.stats_mark DROP CONSTRAINT stats_mark_id_check;
ALTER TABLE {schema}.stats_mark RENAME COLUMN id TO partition_id;
UPDATE {schema}.stats_mark SET partition_id = 0;
ALTER TABLE {schema}.stats_mark ADD CONSTRAINT stats_mark_partition_id_check
    CHECK (partition_id >= 0 AND partition_id < 4096);

-- A new (empty) store gets its chains 1..N-1 here, in the migration's own transaction.
INSERT INTO {schema}.receipt_chain (partition_id, seq, hash)
SELECT g, 0, 'sha256:0000000000000000000000000000000000000000000000000000000000000000'
FROM pg_catalog.generate_series(1, {partitions} - 1) AS g
WHERE NOT EXISTS (SELECT 1 FROM {schema}.receipts)
  AND (SELECT c.seq FROM {schema}.receipt_chain AS c WHERE c.partition_id = 0) = 0;

INSERT INTO {schema}.stats_mark (partition_id, seq)
SELECT c.partition_id, 0 FROM {schema}.receipt_chain AS c WHERE c.partition_id > 0;

-- The two functions that link a receipt take its partition: they lock only that chain's head.
-- The signatures change, so they are created anew: rerun `ctrlrun grants --apply` after this
-- upgrade (docs/postgres.md), which grants them to the agent's role again.
DROP FUNCTION {schema}.ctrlrun_finish_effect(
    text, text, timestamptz, text, text, text, text, text, text, integer, timestamptz, jsonb,
    text, text, text, text, text, text, text
);
DROP FUNCTION {schema}.ctrlrun_record_receipt(
    timestamptz, jsonb, text, text, text, text, text, text, text
);

-- The receipt: linked to its partition's locked head and hashed here, so no caller states a
-- seq, a predecessor or a hash. A partition the store does not keep raises CR002.
CREATE FUNCTION {schema}.ctrlrun_link_receipt(
    p_partition integer, p_now timestamptz,
    p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text,
    p_template text, p_seq_mark text, p_prev_mark text,
    OUT seq bigint, OUT document text, OUT hash text
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
DECLARE
    head record;
BEGIN
    FOR head IN
        SELECT c.seq, c.hash FROM {schema}.receipt_chain AS c
        WHERE c.partition_id = p_partition FOR UPDATE
    LOOP
        seq := head.seq + 1;
        document := replace(replace(p_template, p_seq_mark, seq::text), p_prev_mark, head.hash);
        hash := 'sha256:' || encode(sha256(convert_to(document, 'UTF8')), 'hex');
        INSERT INTO {schema}.receipts
            (partition_id, receipt_id, seq, action_id, effect_key, result, document, hash,
             created_at)
        VALUES (p_partition, p_receipt_id, seq, p_receipt_action_id, p_receipt_effect_key,
                p_result, document, hash, p_now);
        UPDATE {schema}.receipt_chain AS c
        SET seq = ctrlrun_link_receipt.seq, hash = ctrlrun_link_receipt.hash
        WHERE c.partition_id = p_partition;
    END LOOP;
    IF seq IS NULL THEN
        RAISE EXCEPTION 'ctrlrun: the store keeps no receipt partition %', p_partition
            USING ERRCODE = 'CR002';
    END IF;
END
$body$;

-- The outcome: only an EXECUTING attempt moves, and only to an outcome; never a resolution.
CREATE FUNCTION {schema}.ctrlrun_finish_effect(
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

-- A chained receipt and its transaction's events.
CREATE FUNCTION {schema}.ctrlrun_record_receipt(
    p_now timestamptz, p_events jsonb,
    p_receipt_id text, p_receipt_action_id text, p_receipt_effect_key text, p_result text,
    p_template text, p_seq_mark text, p_prev_mark text, p_partition integer,
    OUT seq bigint, OUT document text, OUT hash text
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
DECLARE
    stamped_at timestamptz := COALESCE(p_now, pg_catalog.now());
    linked record;
BEGIN
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

REVOKE ALL ON FUNCTION
    {schema}.ctrlrun_link_receipt, {schema}.ctrlrun_finish_effect,
    {schema}.ctrlrun_record_receipt
FROM PUBLIC;
