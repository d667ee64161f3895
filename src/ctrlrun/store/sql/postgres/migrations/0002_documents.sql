-- Versioned documents (compare-and-swap on `version`). Content is `text`, not `jsonb`: jsonb
-- re-serialises, and the stored bytes must stay exactly what `content_hash` was taken over.
-- `{schema}` is composed by the store with psycopg.sql.Identifier, never by text.

CREATE TABLE {schema}.documents (
    doc_id       text COLLATE "C" PRIMARY KEY,
    kind         text COLLATE "C" NOT NULL,
    version      bigint NOT NULL CHECK (version >= 1),
    content      text NOT NULL,
    content_hash text COLLATE "C" NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    updated_by   text COLLATE "C"
);

-- One row per saved version (creation is version 1): who saved it, when, and its digest.
CREATE TABLE {schema}.document_versions (
    doc_id       text COLLATE "C" NOT NULL REFERENCES {schema}.documents (doc_id),
    version      bigint NOT NULL CHECK (version >= 1),
    content_hash text COLLATE "C" NOT NULL,
    writer       text COLLATE "C",
    saved_at     timestamptz NOT NULL,
    PRIMARY KEY (doc_id, version)
);
