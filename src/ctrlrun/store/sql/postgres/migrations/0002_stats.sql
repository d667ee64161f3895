-- `ctrlrun stats` reads counts, not receipts (docs/rollout.md): receipt_stats holds the calls
-- per hour, decision, result and reason under each dimension's value (action, agent, rule; kept
-- apart so the rollup grows with one dimension's values, not their product), folded from the
-- receipts up to stats_mark.seq; stats_ambiguous notes when each AMBIGUOUS attempt was
-- recorded, so how long it stayed open can be told once it is resolved. Written only by the operator's stats
-- reader, never on a protected call's path; a cache of the receipts, not evidence.

CREATE TABLE {schema}.receipt_stats (
    dimension text COLLATE "C" NOT NULL CHECK (dimension IN ('action', 'agent', 'rule')),
    bucket    timestamptz NOT NULL,
    name      text COLLATE "C" NOT NULL,
    decision  text COLLATE "C" NOT NULL,
    result    text COLLATE "C" NOT NULL,
    reason    text COLLATE "C" NOT NULL,
    calls     bigint NOT NULL CHECK (calls >= 0),
    PRIMARY KEY (dimension, bucket, name, decision, result, reason)
);

CREATE TABLE {schema}.stats_mark (
    id  integer PRIMARY KEY CHECK (id = 1),
    seq bigint NOT NULL
);

INSERT INTO {schema}.stats_mark (id, seq) VALUES (1, 0);

CREATE TABLE {schema}.stats_ambiguous (
    effect_key text COLLATE "C" NOT NULL,
    attempt    integer NOT NULL,
    opened_at  timestamptz NOT NULL,
    PRIMARY KEY (effect_key, attempt)
);
