-- Named queries for versioned documents (SQLite). Parameters are named (:name). The statements
-- are kept dialect-neutral so postgres/documents.sql is the same text with %(name)s and {schema}.

-- name: document_get
SELECT doc_id, kind, version, content, content_hash, created_at, updated_at, updated_by
FROM documents WHERE doc_id = :doc_id;

-- name: document_insert
INSERT INTO documents
    (doc_id, kind, version, content, content_hash, created_at, updated_at, updated_by)
VALUES
    (:doc_id, :kind, 1, :content, :content_hash, :saved_at, :saved_at, :writer)
ON CONFLICT (doc_id) DO NOTHING;

-- The compare-and-swap: matches no row unless the stored version is the one the save was
-- based on. Its row count is the verdict.
-- name: document_update
UPDATE documents
SET version = :version, content = :content, content_hash = :content_hash,
    updated_at = :saved_at, updated_by = :writer
WHERE doc_id = :doc_id AND version = :expected_version;

-- name: document_version_insert
INSERT INTO document_versions (doc_id, version, content_hash, writer, saved_at)
VALUES (:doc_id, :version, :content_hash, :writer, :saved_at);

-- name: document_history
SELECT version, content_hash, writer, saved_at
FROM document_versions WHERE doc_id = :doc_id ORDER BY version;

-- The most recently saved documents first, without their content (a listing).
-- name: document_list
SELECT doc_id, kind, version, updated_at, updated_by
FROM documents ORDER BY updated_at DESC, doc_id LIMIT :limit;
