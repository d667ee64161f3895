-- Named queries for versioned documents (Postgres). Parameters are %(name)s; {schema} is
-- composed by the store with psycopg.sql.Identifier. Same statements as sqlite/documents.sql.

-- name: document_get
SELECT doc_id, kind, version, content, content_hash, created_at, updated_at, updated_by
FROM {schema}.documents WHERE doc_id = %(doc_id)s;

-- name: document_insert
INSERT INTO {schema}.documents
    (doc_id, kind, version, content, content_hash, created_at, updated_at, updated_by)
VALUES
    (%(doc_id)s, %(kind)s, 1, %(content)s, %(content_hash)s, %(saved_at)s, %(saved_at)s,
     %(writer)s)
ON CONFLICT (doc_id) DO NOTHING;

-- The compare-and-swap: matches no row unless the stored version is the one the save was
-- based on (under READ COMMITTED a concurrent winner makes it re-check and match nothing).
-- name: document_update
UPDATE {schema}.documents
SET version = %(version)s, content = %(content)s, content_hash = %(content_hash)s,
    updated_at = %(saved_at)s, updated_by = %(writer)s
WHERE doc_id = %(doc_id)s AND version = %(expected_version)s;

-- name: document_version_insert
INSERT INTO {schema}.document_versions (doc_id, version, content_hash, writer, saved_at)
VALUES (%(doc_id)s, %(version)s, %(content_hash)s, %(writer)s, %(saved_at)s);

-- name: document_history
SELECT version, content_hash, writer, saved_at
FROM {schema}.document_versions WHERE doc_id = %(doc_id)s ORDER BY version;

-- The most recently saved documents first, without their content (a listing).
-- name: document_list
SELECT doc_id, kind, version, updated_at, updated_by
FROM {schema}.documents ORDER BY updated_at DESC, doc_id LIMIT %(limit)s;
