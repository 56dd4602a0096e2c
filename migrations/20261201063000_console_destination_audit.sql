-- The console's actions on forwarding (pause and resume a destination,
-- replay a job or a destination's dead jobs) go into the same audit as its
-- reprocessing. Such an action names a destination, and a job when it acts
-- on one; it has an event only when it acts on a job, and an archive row
-- never (a job belongs to an event, not to one of its deliveries).
ALTER TABLE console_audit
    ALTER COLUMN provider DROP NOT NULL,
    ALTER COLUMN event_id DROP NOT NULL,
    ALTER COLUMN archive_id DROP NOT NULL,
    ADD COLUMN destination text,
    ADD COLUMN job_id bigint,
    -- Every row names what it acted on: an archive row, a job, or a destination.
    ADD CONSTRAINT ck_console_audit_subject
        CHECK (archive_id IS NOT NULL OR job_id IS NOT NULL OR destination IS NOT NULL);

-- The latest actions on destinations, newest first, on every overview.
CREATE INDEX ix_console_audit_destination_id ON console_audit (id) WHERE destination IS NOT NULL;
