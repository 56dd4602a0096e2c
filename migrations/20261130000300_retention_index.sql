-- Retention purges archive rows by age, oldest first (src/operations/purge.rs).
-- Without an index on created_at each purge walked the primary key through
-- the whole archive to find the few rows old enough, every hour on every
-- replica. FAILED rows, kept longer, have ix_webhook_events_failed_created_at;
-- this one covers every other row, so each purge batch reads exactly the rows
-- it deletes.
--
-- A btree, not BRIN: the archive is append-ordered only until the first
-- purge. Vacuum hands the purged pages to new rows, and a BRIN range's
-- summary only ever widens, so every range that once held an old row keeps
-- matching "older than": measured over 30 simulated days of purging, a BRIN
-- index made the purge read a third of the table (the whole of it after one
-- retention period). This btree costs each delivery about 65 bytes of WAL
-- (+6%) and no measurable throughput.
--
-- Building it takes a lock that makes deliveries wait (503 past
-- LOCK_TIMEOUT_MS) for as long as the build lasts. On a large archive, create
-- it beforehand without that lock, and this migration then finds it there:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_webhook_events_created_at
--       ON webhook_events (created_at) WHERE processing_status <> 'FAILED';
-- (Not CONCURRENTLY here: replicas migrating at once would deadlock, each
-- waiting for the other under the migration lock.)
--
-- The build may outlast STATEMENT_TIMEOUT_MS on a large archive, and a
-- migration that always times out would keep the service from starting:
-- lifted for this migration's transaction (LOCK_TIMEOUT_MS still bounds
-- the wait for the lock).
SET LOCAL statement_timeout = 0;
CREATE INDEX IF NOT EXISTS ix_webhook_events_created_at
    ON webhook_events (created_at) WHERE processing_status <> 'FAILED';
