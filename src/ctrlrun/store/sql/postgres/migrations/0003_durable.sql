-- Durable step execution on Postgres: the outbox, approved plans and their step receipts,
-- long-running operations. Tables are written {schema}.name; the store composes the schema
-- with psycopg.sql.Identifier. Identity columns are COLLATE "C" (byte order, no locale);
-- instants are timestamptz stamped with the server's now(). JSON is kept as text: the exact
-- canonical bytes matter (a plan's steps are hashed), and jsonb would reorder keys.

CREATE TABLE {schema}.outbox (
    message_id       text COLLATE "C" PRIMARY KEY,
    topic            text COLLATE "C" NOT NULL,
    payload_json     text NOT NULL,
    dedupe_key       text COLLATE "C",
    status           text NOT NULL
                     CHECK (status IN ('pending', 'processing', 'sent', 'failed', 'dead',
                                       'ambiguous')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL,
    lease_expires_at timestamptz,
    claimed_by       text COLLATE "C",
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    last_error       text
);

CREATE UNIQUE INDEX outbox_dedupe ON {schema}.outbox (topic, dedupe_key)
    WHERE dedupe_key IS NOT NULL;

-- the claim scans only what can be claimed or reclaimed
CREATE INDEX outbox_due ON {schema}.outbox (next_attempt_at) WHERE status = 'pending';

CREATE INDEX outbox_processing ON {schema}.outbox (lease_expires_at)
    WHERE status = 'processing';

CREATE INDEX outbox_by_status ON {schema}.outbox (status, created_at);

CREATE TABLE {schema}.plans (
    plan_id              text COLLATE "C" PRIMARY KEY,
    plan_hash            text COLLATE "C" NOT NULL,
    steps_json           text NOT NULL,
    agent                text NOT NULL,
    user_name            text,
    status               text NOT NULL
                         CHECK (status IN ('pending', 'approved', 'executing', 'executed',
                                           'failed', 'expired', 'rejected')),
    created_at           timestamptz NOT NULL,
    expires_at           timestamptz NOT NULL,
    approver             text,
    answered_at          timestamptz,
    approved_hash        text COLLATE "C",
    claim_epoch          integer NOT NULL DEFAULT 0,
    claimed_by           text COLLATE "C",
    heartbeat_expires_at timestamptz,
    started_at           timestamptz,
    finished_at          timestamptz,
    next_step            integer NOT NULL DEFAULT 0,
    interruptions        integer NOT NULL DEFAULT 0,
    error                text
);

CREATE INDEX plans_by_status ON {schema}.plans (status, created_at);

CREATE TABLE {schema}.plan_steps (
    plan_id     text COLLATE "C" NOT NULL REFERENCES {schema}.plans (plan_id),
    step_index  integer NOT NULL CHECK (step_index >= 0),
    action      text NOT NULL,
    result      text NOT NULL CHECK (result IN ('ok', 'failed', 'ambiguous')),
    output_json text,
    error       text,
    effect_key  text COLLATE "C",
    claim_epoch integer NOT NULL,
    receipt_id  text COLLATE "C" NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (plan_id, step_index)
);

CREATE TABLE {schema}.operations (
    operation_id     text COLLATE "C" PRIMARY KEY,
    kind             text NOT NULL,
    resource         text COLLATE "C" NOT NULL,
    arguments_json   text NOT NULL,
    idempotency_key  text COLLATE "C" UNIQUE,
    status           text NOT NULL
                     CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'canceled')),
    remote_id        text COLLATE "C",
    claim_epoch      integer NOT NULL DEFAULT 0,
    claimed_by       text COLLATE "C",
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    polls            integer NOT NULL DEFAULT 0,
    reconcile        text,
    result_json      text,
    error            text
);

CREATE UNIQUE INDEX operations_in_flight ON {schema}.operations (resource)
    WHERE status IN ('queued', 'running');

CREATE INDEX operations_by_status ON {schema}.operations (status, created_at);
