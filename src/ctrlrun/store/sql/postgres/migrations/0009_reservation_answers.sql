-- A reservation whose key exists answers with the record it met instead of failing (issue 28,
-- decision 0032). Since 0008 its CR001 carried that record as DETAIL, but an error leaves the
-- explicit transaction of the folded message aborted, so the client spent one more round trip
-- on ROLLBACK. Now both reservation functions return it as `met` (the same JSON; NULL when the
-- reservation landed), having written nothing, and ctrlrun_reserve_templated then stamps no
-- time (stamped_at NULL). The events go in only after a reservation that landed, and the
-- action's first effect-key template is recorded only then too, so the message's COMMIT ends
-- an empty transaction (no transaction id, no WAL). A template that differs from the
-- remembered one still raises CR001, before anything is written.
--
-- The return types change, so both functions are created anew. The old
-- ctrlrun_reserve_templated is renamed first and dropped last, so the roles that could run it
-- (`ctrlrun grants`: the agent's) are granted the new one by name in between: an upgraded
-- store needs no grants re-applied. PUBLIC gets nothing, as in 0004.

ALTER FUNCTION {schema}.ctrlrun_reserve_templated(
    text, text, text, bigint, text, timestamptz, text, integer, jsonb, text, text
) RENAME TO ctrlrun_reserve_templated_0008;

DROP FUNCTION {schema}.ctrlrun_reserve_effect(
    text, text, text, bigint, text, timestamptz, text, integer, jsonb
);

-- Attempt 1 of an absent key and its events, stamped with COALESCE(p_now, now()); returns
-- NULL, or the record met and nothing written. One value, not a row: its caller reads a
-- scalar without building and taking apart a row (a row measured ~8 µs more per winner).
CREATE FUNCTION {schema}.ctrlrun_reserve_effect(
    p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text,
    p_now timestamptz, p_lease_mark text, p_mark_row integer, p_events jsonb,
    OUT met text
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
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
    INSERT INTO {schema}.effects
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
                FROM {schema}.effects AS f WHERE f.effect_key = p_effect_key), '');
        RETURN;
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

-- The template is checked first (a differing one raises CR001 before anything is written)
-- and, the first time, recorded only with a reservation that landed; a first record lost to
-- a concurrent one still raises CR001, which rolls the reservation back with it. A key met
-- stamps no time: a client that reads stamped_at alone (one still running the binary before
-- 0009, which expected CR001 there) fails on the NULL instead of taking the key for its own.
CREATE FUNCTION {schema}.ctrlrun_reserve_templated(
    p_effect_key text, p_state text, p_action_id text, p_lease_us bigint, p_write_token text,
    p_now timestamptz, p_lease_mark text, p_mark_row integer, p_events jsonb,
    p_action text, p_template text,
    OUT stamped_at timestamptz, OUT met text
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $body$
DECLARE
    known text;
BEGIN
    IF p_template IS NOT NULL THEN
        known := (SELECT t.template FROM {schema}.effect_templates AS t
                  WHERE t.action = p_action);
        IF known <> p_template THEN
            RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
                USING ERRCODE = 'CR001';
        END IF;
    END IF;
    met := {schema}.ctrlrun_reserve_effect(
        p_effect_key, p_state, p_action_id, p_lease_us, p_write_token, p_now, p_lease_mark,
        p_mark_row, p_events
    );
    -- the instant ctrlrun_reserve_effect stamped: now() is the transaction's start
    stamped_at := CASE WHEN met IS NULL THEN COALESCE(p_now, pg_catalog.now()) END;
    IF met IS NULL AND p_template IS NOT NULL AND known IS NULL THEN
        INSERT INTO {schema}.effect_templates (action, template, recorded_at, accepted_by)
        VALUES (p_action, p_template, stamped_at, NULL)
        ON CONFLICT (action) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'ctrlrun: a folded conditional write matched no row'
                USING ERRCODE = 'CR001';
        END IF;
    END IF;
END
$body$;

REVOKE ALL ON FUNCTION
    {schema}.ctrlrun_reserve_effect, {schema}.ctrlrun_reserve_templated
FROM PUBLIC;

-- Whoever was granted the old function by name (never PUBLIC, never the owner, who needs no
-- grant) may run the new one, as before, with the grant option only if it held it.
DO $grants$
DECLARE
    held record;
BEGIN
    FOR held IN
        SELECT a.grantee::pg_catalog.regrole AS grantee, a.is_grantable
        FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
        WHERE p.oid = '{schema}.ctrlrun_reserve_templated_0008(text, text, text, bigint, text,
                  timestamptz, text, integer, jsonb, text, text)'::pg_catalog.regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION %s TO %s%s',
            '{schema}.ctrlrun_reserve_templated(text, text, text, bigint, text, timestamptz,
             text, integer, jsonb, text, text)'::pg_catalog.regprocedure,
            held.grantee,
            CASE WHEN held.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
        );
    END LOOP;
END
$grants$;

DROP FUNCTION {schema}.ctrlrun_reserve_templated_0008(
    text, text, text, bigint, text, timestamptz, text, integer, jsonb, text, text
);
