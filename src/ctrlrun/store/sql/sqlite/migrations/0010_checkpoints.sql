-- Signed checkpoints of the receipt chain, and where the chain starts after a prune
-- (docs/checkpoints.md, decision 0023). Written only by `ctrlrun checkpoint` and `ctrlrun
-- prune` (ctrlrun.checkpoints), never by a protected call.

-- Every checkpoint statement made, exactly as signed (the copy outside the store is the one
-- that proves anything: whoever writes this file can delete these rows).
CREATE TABLE checkpoints (
    checkpoint_id INTEGER PRIMARY KEY,
    made_at       TEXT NOT NULL,
    origin        TEXT NOT NULL,
    statement     TEXT NOT NULL
);

-- After a prune: the checkpointed head (seq, hash) the oldest remaining receipt of the
-- partition links to, and the signed statement that states it. No row: the chain starts at
-- genesis.
CREATE TABLE receipt_anchor (
    partition_id INTEGER PRIMARY KEY CHECK (partition_id >= 0),
    seq          INTEGER NOT NULL CHECK (seq >= 1),
    hash         TEXT NOT NULL,
    statement    TEXT NOT NULL,
    anchored_at  TEXT NOT NULL
) WITHOUT ROWID;
