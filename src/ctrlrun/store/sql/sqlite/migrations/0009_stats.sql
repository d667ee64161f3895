-- `ctrlrun stats` reads counts, not receipts (docs/rollout.md): receipt_stats holds the calls
-- per hour, decision, result and reason under each dimension's value (action, agent, rule; kept
-- apart so the rollup grows with one dimension's values, not their product), folded from the
-- receipts up to stats_mark.seq; stats_ambiguous notes when each AMBIGUOUS attempt was
-- recorded, so how long it stayed open can be told once it is resolved. Written only by the operator's stats
-- reader, never on a protected call's path; a cache of the receipts, not evidence.

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

CREATE TABLE stats_mark (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);

INSERT INTO stats_mark (id, seq) VALUES (1, 0);

CREATE TABLE stats_ambiguous (
    effect_key TEXT NOT NULL,
    attempt    INTEGER NOT NULL,
    opened_at  TEXT NOT NULL,
    PRIMARY KEY (effect_key, attempt)
) WITHOUT ROWID;
