-- ctrlrun Postgres schema, baseline. {schema} is the store's schema, composed as an identifier
-- (never an f-string). Applied in one transaction together with its schema_version row.
-- Identity columns are COLLATE "C" (byte comparison: no locale can merge two keys); times are
-- timestamptz; documents and results are text, so their exact bytes survive.

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

CREATE INDEX effects_by_state ON {schema}.effects (state, created_at);

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
    consumed_by  text COLLATE "C"
);

CREATE INDEX approvals_by_status ON {schema}.approvals (status, created_at);

CREATE TABLE {schema}.events (
    event_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts          timestamptz NOT NULL,
    type        text COLLATE "C" NOT NULL,
    action_id   text COLLATE "C",
    effect_key  text COLLATE "C",
    approval_id text COLLATE "C",
    data_json   text NOT NULL
);

CREATE INDEX events_by_action ON {schema}.events (action_id);

CREATE TABLE {schema}.receipts (
    receipt_id text COLLATE "C" PRIMARY KEY,
    seq        bigint UNIQUE,
    action_id  text COLLATE "C" NOT NULL,
    effect_key text COLLATE "C",
    result     text COLLATE "C" NOT NULL,
    document   text NOT NULL,
    hash       text COLLATE "C",
    created_at timestamptz NOT NULL
);

CREATE INDEX receipts_by_action ON {schema}.receipts (action_id);

-- The chain head: one row, locked first by every receipt write and held across its insert.
CREATE TABLE {schema}.receipt_chain (
    id   integer PRIMARY KEY CHECK (id = 1),
    seq  bigint NOT NULL,
    hash text COLLATE "C" NOT NULL
);

INSERT INTO {schema}.receipt_chain (id, seq, hash)
VALUES (1, 0, 'sha256:0000000000000000000000000000000000000000000000000000000000000000');
