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
