-- Replication: what a COMMIT on this server waits for, and where the server stands
-- (store/postgres/replication.py). Read on every new connection, never inside a transaction.

-- name: replication_probe
-- One round trip. A standby has no current WAL position, so its timeline is NULL; the
-- standbys' sync_state is NULL to a role without pg_read_all_stats (pg_monitor), which
-- ``sync_visible`` reports. The timeline is the first 8 hex digits of the current WAL file's
-- name: pg_control_checkpoint() would lag a promotion until the next checkpoint.
SELECT pg_catalog.pg_is_in_recovery() AS in_recovery,
       pg_catalog.current_setting('synchronous_commit') AS synchronous_commit,
       pg_catalog.current_setting('synchronous_standby_names') AS synchronous_standby_names,
       (SELECT s.system_identifier FROM pg_catalog.pg_control_system() AS s)
           AS system_identifier,
       CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL
            ELSE ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(
                     pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::integer END AS timeline,
       (SELECT count(*) FROM pg_catalog.pg_stat_replication AS r) AS standbys,
       (SELECT count(*) FROM pg_catalog.pg_stat_replication AS r
         WHERE r.sync_state IN ('sync', 'quorum')) AS sync_standbys,
       (SELECT count(*) FROM pg_catalog.pg_stat_replication AS r
         WHERE r.sync_state IS NULL) = 0 AS sync_visible;

-- name: replication_probe_settings
-- The same without the cluster's identity, for a role denied pg_control_system() (some
-- managed services revoke it): the settings and the standbys, no timeline to compare.
SELECT pg_catalog.pg_is_in_recovery() AS in_recovery,
       pg_catalog.current_setting('synchronous_commit') AS synchronous_commit,
       pg_catalog.current_setting('synchronous_standby_names') AS synchronous_standby_names,
       NULL::bigint AS system_identifier,
       NULL::integer AS timeline,
       (SELECT count(*) FROM pg_catalog.pg_stat_replication AS r) AS standbys,
       (SELECT count(*) FROM pg_catalog.pg_stat_replication AS r
         WHERE r.sync_state IN ('sync', 'quorum')) AS sync_standbys,
       (SELECT count(*) FROM pg_catalog.pg_stat_replication AS r
         WHERE r.sync_state IS NULL) = 0 AS sync_visible;

-- name: replication_barrier
-- A transactional WAL record of no consequence. Committed in its own transaction, its COMMIT
-- waits for the synchronous standbys like any other, and WAL is replicated in order: a clean
-- answer proves every earlier COMMIT on this server replicated too.
SELECT pg_catalog.pg_logical_emit_message(true, 'ctrlrun', 'durability') AS lsn;
