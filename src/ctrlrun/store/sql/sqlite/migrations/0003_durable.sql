-- Durable step execution: the outbox, approved plans and their step receipts, long-running
-- operations. Independent of every other migration (it creates only its own tables), so it
-- can be renumbered at merge without touching its content.

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

-- a dedupe key names at most one message per topic, forever (not only while it is pending)
CREATE UNIQUE INDEX outbox_dedupe ON outbox (topic, dedupe_key) WHERE dedupe_key IS NOT NULL;

CREATE INDEX outbox_due ON outbox (status, next_attempt_at);

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
);

CREATE INDEX plans_by_status ON plans (status, created_at);

-- one receipt per step position, ever: a second write of the same step fails the transaction
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

-- at most one operation in flight per resource
CREATE UNIQUE INDEX operations_in_flight ON operations (resource)
    WHERE status IN ('queued', 'running');

CREATE INDEX operations_by_status ON operations (status, created_at);
