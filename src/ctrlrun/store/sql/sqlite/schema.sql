-- The SQLite schema of a store migrated by this ctrlrun: read it to see the schema
-- whole (migrations/ is what creates it). Made by the test that checks it,
-- tests/store/test_schema_artifact.py; CTRLRUN_WRITE_SCHEMA=1 rewrites it.

CREATE TABLE approval_grants (
    approval_id TEXT NOT NULL,
    approver    TEXT NOT NULL,
    granted_at  TEXT NOT NULL,
    signature   TEXT,
    PRIMARY KEY (approval_id, approver)
) WITHOUT ROWID;

CREATE TABLE approvals (
    approval_id  TEXT PRIMARY KEY,
    action_hash  TEXT NOT NULL,
    action_json  TEXT NOT NULL,
    policy_hash  TEXT NOT NULL,
    status       TEXT NOT NULL
                 CHECK (status IN ('pending', 'granted', 'denied', 'expired', 'consumed')),
    created_at   TEXT NOT NULL,
    expires_at   TEXT NOT NULL,
    approver     TEXT,
    answered_at  TEXT,
    consumed_at  TEXT,
    consumed_by  TEXT
, required INTEGER NOT NULL DEFAULT 1, excluded_json TEXT NOT NULL DEFAULT '[]');

CREATE TABLE budget_charges (
    action_id    TEXT PRIMARY KEY,
    budget_id    TEXT NOT NULL,
    window_start TEXT NOT NULL,
    amount       INTEGER NOT NULL CHECK (amount >= 0),
    charged_at   TEXT NOT NULL,
    returned_at  TEXT
) WITHOUT ROWID;

CREATE TABLE budget_spend (
    budget_id    TEXT NOT NULL,
    window_start TEXT NOT NULL,
    spent        INTEGER NOT NULL CHECK (spent >= 0),
    PRIMARY KEY (budget_id, window_start)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
    checkpoint_id INTEGER PRIMARY KEY,
    made_at       TEXT NOT NULL,
    origin        TEXT NOT NULL,
    statement     TEXT NOT NULL
);

CREATE TABLE document_versions (
    doc_id       TEXT NOT NULL REFERENCES documents (doc_id),
    version      INTEGER NOT NULL CHECK (version >= 1),
    content_hash TEXT NOT NULL,
    writer       TEXT,
    saved_at     TEXT NOT NULL,
    PRIMARY KEY (doc_id, version)
);

CREATE TABLE documents (
    doc_id       TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    version      INTEGER NOT NULL CHECK (version >= 1),
    content      TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    updated_by   TEXT
);

CREATE TABLE effect_templates (
    action      TEXT PRIMARY KEY,
    template    TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    accepted_by TEXT
) WITHOUT ROWID;

CREATE TABLE effects (
    effect_key       TEXT PRIMARY KEY,
    state            TEXT NOT NULL
                     CHECK (state IN ('reserved', 'executing', 'committed', 'failed', 'ambiguous')),
    action_id        TEXT NOT NULL,
    attempt          INTEGER NOT NULL CHECK (attempt >= 1),
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    lease_expires_at TEXT,
    result_json      TEXT,
    error            TEXT,
    resolved_by      TEXT
, committed_receipt_id TEXT) WITHOUT ROWID;

CREATE TABLE events (
    event_id    INTEGER PRIMARY KEY,
    ts          TEXT NOT NULL,
    type        TEXT NOT NULL,
    action_id   TEXT,
    effect_key  TEXT,
    approval_id TEXT,
    data_json   TEXT NOT NULL
);

CREATE TABLE operations (
    operation_id     TEXT PRIMARY KEY,
    kind             TEXT NOT NULL,
    resource         TEXT NOT NULL,
    arguments_json   TEXT NOT NULL,
    idempotency_key  TEXT UNIQUE,
    status           TEXT NOT NULL
                     CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'canceled')),
    remote_id        TEXT,
    claim_epoch      INTEGER NOT NULL DEFAULT 0,
    claimed_by       TEXT,
    lease_expires_at TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    started_at       TEXT,
    finished_at      TEXT,
    polls            INTEGER NOT NULL DEFAULT 0,
    reconcile        TEXT,
    result_json      TEXT,
    error            TEXT
);

CREATE TABLE outbox (
    message_id       TEXT PRIMARY KEY,
    topic            TEXT NOT NULL,
    payload_json     TEXT NOT NULL,
    dedupe_key       TEXT,
    status           TEXT NOT NULL
                     CHECK (status IN ('pending', 'processing', 'sent', 'failed', 'dead',
                                       'ambiguous')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  TEXT NOT NULL,
    lease_expires_at TEXT,
    claimed_by       TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    finished_at      TEXT,
    last_error       TEXT
);

CREATE TABLE plan_steps (
    plan_id     TEXT NOT NULL REFERENCES plans (plan_id),
    step_index  INTEGER NOT NULL CHECK (step_index >= 0),
    action      TEXT NOT NULL,
    result      TEXT NOT NULL CHECK (result IN ('ok', 'failed', 'ambiguous')),
    output_json TEXT,
    error       TEXT,
    effect_key  TEXT,
    claim_epoch INTEGER NOT NULL,
    receipt_id  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (plan_id, step_index)
);

CREATE TABLE plans (
    plan_id              TEXT PRIMARY KEY,
    plan_hash            TEXT NOT NULL,
    steps_json           TEXT NOT NULL,
    agent                TEXT NOT NULL,
    user_name            TEXT,
    status               TEXT NOT NULL
                         CHECK (status IN ('pending', 'approved', 'executing', 'executed',
                                           'failed', 'expired', 'rejected')),
    created_at           TEXT NOT NULL,
    expires_at           TEXT NOT NULL,
    approver             TEXT,
    answered_at          TEXT,
    approved_hash        TEXT,
    claim_epoch          INTEGER NOT NULL DEFAULT 0,
    claimed_by           TEXT,
    heartbeat_expires_at TEXT,
    started_at           TEXT,
    finished_at          TEXT,
    next_step            INTEGER NOT NULL DEFAULT 0,
    interruptions        INTEGER NOT NULL DEFAULT 0,
    error                TEXT
, approval_signature TEXT, answer_reason TEXT);

CREATE TABLE receipt_anchor (
    partition_id INTEGER PRIMARY KEY CHECK (partition_id >= 0),
    seq          INTEGER NOT NULL CHECK (seq >= 1),
    hash         TEXT NOT NULL,
    statement    TEXT NOT NULL,
    anchored_at  TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE receipt_chain (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT NOT NULL
);

CREATE TABLE receipt_stats (
    dimension TEXT NOT NULL CHECK (dimension IN ('action', 'agent', 'rule')),
    bucket    TEXT NOT NULL,
    name      TEXT NOT NULL,
    decision  TEXT NOT NULL,
    result    TEXT NOT NULL,
    reason    TEXT NOT NULL,
    calls     INTEGER NOT NULL CHECK (calls >= 0),
    PRIMARY KEY (dimension, bucket, name, decision, result, reason)
) WITHOUT ROWID;

CREATE TABLE receipts (
    seq        INTEGER PRIMARY KEY,
    receipt_id TEXT NOT NULL,
    action_id  TEXT NOT NULL,
    effect_key TEXT,
    result     TEXT NOT NULL,
    document   TEXT NOT NULL,
    hash       TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE schema_version (migration_id TEXT PRIMARY KEY, applied_at TEXT NOT NULL, ctrlrun_version TEXT NOT NULL);

CREATE TABLE stats_ambiguous (
    effect_key TEXT NOT NULL,
    attempt    INTEGER NOT NULL,
    opened_at  TEXT NOT NULL,
    PRIMARY KEY (effect_key, attempt)
) WITHOUT ROWID;

CREATE TABLE stats_mark (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);

CREATE INDEX approvals_by_action ON approvals (action_hash);

CREATE INDEX approvals_by_status ON approvals (status, created_at);

CREATE INDEX operations_by_status ON operations (status, created_at);

CREATE UNIQUE INDEX operations_in_flight ON operations (resource)
    WHERE status IN ('queued', 'running');

CREATE UNIQUE INDEX outbox_dedupe ON outbox (topic, dedupe_key) WHERE dedupe_key IS NOT NULL;

CREATE INDEX outbox_due ON outbox (status, next_attempt_at);

CREATE INDEX plans_by_status ON plans (status, created_at);

CREATE TRIGGER budget_charge_returned
AFTER UPDATE OF returned_at ON budget_charges
WHEN OLD.returned_at IS NULL AND NEW.returned_at IS NOT NULL
BEGIN
    UPDATE budget_spend SET spent = spent - NEW.amount
    WHERE budget_id = NEW.budget_id AND window_start = NEW.window_start;
END;
