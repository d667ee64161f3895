-- Signed checkpoints of the receipt chain, and where the chain starts after a prune
-- (docs/checkpoints.md, decision 0023). Written only by `ctrlrun checkpoint` and `ctrlrun
-- prune` (ctrlrun.checkpoints), never by a protected call: an agent's role needs no
-- privilege on either table.

-- Every checkpoint statement made, exactly as signed (the copy outside the store is the one
-- that proves anything: whoever can write this table can delete these rows).
CREATE TABLE {schema}.checkpoints (
    checkpoint_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    made_at       timestamptz NOT NULL,
    origin        text COLLATE "C" NOT NULL,
    statement     text NOT NULL
);

-- After a prune: the checkpointed head (seq, hash) the oldest remaining receipt of the
-- partition links to, and the signed statement that states it. No row: the chain starts at
-- genesis.
CREATE TABLE {schema}.receipt_anchor (
    partition_id integer PRIMARY KEY CHECK (partition_id >= 0),
    seq          bigint NOT NULL CHECK (seq >= 1),
    hash         text COLLATE "C" NOT NULL,
    statement    text NOT NULL,
    anchored_at  timestamptz NOT NULL
);
