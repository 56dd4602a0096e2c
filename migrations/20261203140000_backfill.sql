-- Jobs enqueued by `destinations backfill` for events recorded before the
-- destination wanted them. Claims take live jobs first (backfill = false
-- sorts first), so a backfill of months of events never queues ahead of a
-- fresh event (DESIGN.md, "Backfill"); the pending index leads with it so
-- that order is still an index scan.
ALTER TABLE destination_jobs ADD COLUMN backfill boolean NOT NULL DEFAULT false;
DROP INDEX ix_destination_jobs_pending;
CREATE INDEX ix_destination_jobs_pending
    ON destination_jobs (destination, backfill, next_attempt_at, id) WHERE status = 'pending';
