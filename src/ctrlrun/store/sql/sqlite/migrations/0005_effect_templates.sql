-- Effect-key templates remembered per action (docs/decisions/0017-effect-template-memory.md).
--
-- The first call that reserves a key for an action records the template the key was rendered
-- from; a later call rendering that action's key from another template is refused
-- (effect_template_changed) until an operator accepts the change (`ctrlrun policy accept`),
-- because a different key for the same effect is a second run of it. accepted_by is NULL for
-- a template recorded by a call, the operator for one accepted.

CREATE TABLE effect_templates (
    action      TEXT PRIMARY KEY,
    template    TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    accepted_by TEXT
) WITHOUT ROWID;
