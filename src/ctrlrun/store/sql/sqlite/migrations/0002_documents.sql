-- Versioned documents (compare-and-swap on `version`). Content is stored as its canonical JSON
-- text, byte for byte what `content_hash` was taken over, so the digest can be re-checked.

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

-- One row per saved version (creation is version 1): who saved it, when, and its digest.
CREATE TABLE document_versions (
    doc_id       TEXT NOT NULL REFERENCES documents (doc_id),
    version      INTEGER NOT NULL CHECK (version >= 1),
    content_hash TEXT NOT NULL,
    writer       TEXT,
    saved_at     TEXT NOT NULL,
    PRIMARY KEY (doc_id, version)
);
