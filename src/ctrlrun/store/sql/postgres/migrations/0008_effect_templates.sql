-- ctrlrun Postgres schema: effect-key templates remembered per action
-- (docs/decisions/0017-effect-template-memory.md). {schema} is composed as an identifier.
-- Applied in one transaction together with its schema_version row.
--
-- The first call that reserves a key for an action records the template the key was rendered
-- from; a later call rendering that action's key from another template is refused
-- (effect_template_changed) until an operator accepts the change (`ctrlrun policy accept`).
-- accepted_by is NULL for a template recorded by a call, the operator for one accepted.

CREATE TABLE {schema}.effect_templates (
    action      text COLLATE "C" PRIMARY KEY,
    template    text NOT NULL,
    recorded_at timestamptz NOT NULL,
    accepted_by text
);

-- ctrlrun_reserve_effect (0006) with the template check first: a remembered template that
-- differs, or a first record lost to a concurrent one, raises CR001 and nothing commits; the
-- store then runs the shared path, which reads the template and refuses with the reason. An
-- action seen for the first time has its template recorded in the same transaction. The old
-- function stays (as 0006 left 0005's); nothing of this binary calls it.
CREATE FUNCTION {schema}.ctrlrun_reserve_templated(
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
