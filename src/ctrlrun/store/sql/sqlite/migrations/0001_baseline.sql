-- ctrlrun SQLite schema, baseline. One statement per block; applied in one transaction
-- together with its schema_version row.

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
) WITHOUT ROWID;

-- No index on state: every index on a hot table is one more page written by every call,
-- and listing by state is an operator's occasional scan.

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
);

CREATE INDEX approvals_by_status ON approvals (status, created_at);

CREATE TABLE events (
    event_id    INTEGER PRIMARY KEY,
    ts          TEXT NOT NULL,
    type        TEXT NOT NULL,
    action_id   TEXT,
    effect_key  TEXT,
    approval_id TEXT,
    data_json   TEXT NOT NULL
);

CREATE INDEX events_by_action ON events (action_id);

-- Keyed by seq: receipts are appended in chain order, so the table grows at its right edge.
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

CREATE INDEX receipts_by_action ON receipts (action_id);

CREATE TABLE receipt_chain (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT NOT NULL
);

INSERT INTO receipt_chain (id, seq, hash)
VALUES (1, 0, 'sha256:0000000000000000000000000000000000000000000000000000000000000000');
