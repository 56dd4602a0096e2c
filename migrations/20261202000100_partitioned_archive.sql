-- The archive and the forwarding attempts become partitioned tables, so
-- that retention drops a day of rows as one file instead of deleting them
-- row by row (DESIGN.md, "The partitioned archive").
--
--   webhook_events                 LIST (processing_status)
--     webhook_events_failed          FAILED: kept longer, purged in batches
--     webhook_events_daily           every other status: RANGE (created_at)
--       webhook_events_daily_pYYYYMMDD   one UTC day each
--   destination_attempts           RANGE (attempted_at)
--     destination_attempts_pYYYYMMDD     one UTC day each
--
-- Why FAILED rows have a partition of their own: they are kept longer than
-- the rest (FAILED_RETENTION_DAYS), and an archive row never changes
-- status, so a row is written where it will stay for as long as it is kept
-- and nothing has to be moved out of a day before that day is dropped.
--
-- On a live service this migration only swaps tables: the old ones are
-- renamed (ACCESS EXCLUSIVE, held for as long as this transaction, which
-- touches no row), the partitioned ones take their names, and deliveries
-- go to them from the commit on, including those of replicas still running
-- the previous version (PostgreSQL resolves a name again after DDL). The
-- rows of the old tables are then moved over in the background by `serve`
-- or `migrate` (src/db/conversion.rs), newest first, in small batches;
-- until that ends, listings lack the rows not moved yet. The dedup table
-- is not touched, so no event is applied twice meanwhile.

-- The old tables step aside under names of their own. Their indexes go
-- (their names are the new tables'), but the primary key the conversion
-- reads in batches and the index that finds the range of days it needs.
ALTER TABLE webhook_events RENAME TO webhook_events_unpartitioned;
ALTER SEQUENCE webhook_events_id_seq RENAME TO webhook_events_unpartitioned_id_seq;
ALTER INDEX webhook_events_pkey RENAME TO webhook_events_unpartitioned_pkey;
ALTER INDEX ix_webhook_events_created_at RENAME TO ix_webhook_events_unpartitioned_created_at;
DROP INDEX ix_webhook_events_failed_created_at, ix_webhook_events_provider_created_at,
    ix_webhook_events_event_type_id, ix_webhook_events_failed_id, ix_webhook_events_failed_event,
    ix_webhook_events_event_id_provider;

ALTER TABLE destination_attempts RENAME TO destination_attempts_unpartitioned;
ALTER INDEX destination_attempts_pkey RENAME TO destination_attempts_unpartitioned_pkey;
ALTER INDEX ix_destination_attempts_attempted_at RENAME TO ix_destination_attempts_unpartitioned_attempted_at;

-- The same columns, defaults, checks, compression and comments as the
-- tables they replace. A unique key of a partitioned table must contain
-- its partition keys.
CREATE TABLE webhook_events (
    LIKE webhook_events_unpartitioned
        INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY
        INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING COMMENTS,
    PRIMARY KEY (id, created_at, processing_status)
) PARTITION BY LIST (processing_status);
-- Ids go on from where the old table's ended.
SELECT setval(pg_get_serial_sequence('webhook_events', 'id'), last_value, is_called)
FROM webhook_events_unpartitioned_id_seq;

CREATE TABLE webhook_events_failed PARTITION OF webhook_events FOR VALUES IN ('FAILED');
CREATE TABLE webhook_events_daily PARTITION OF webhook_events
    FOR VALUES IN ('PENDING', 'PROCESSED', 'SKIPPED') PARTITION BY RANGE (created_at);

-- Every partition gets these (src/operations: listings, the overview, the
-- metrics; DESIGN.md shows their plans):
-- listings newest first, with or without a time range, and FAILED rows by age;
CREATE INDEX ix_webhook_events_created_at_id ON webhook_events (created_at, id);
-- the overview's deliveries per provider and minute, from the index alone;
CREATE INDEX ix_webhook_events_provider_created_at
    ON webhook_events (provider, created_at) INCLUDE (processing_status);
-- listings of one event type, newest first;
CREATE INDEX ix_webhook_events_event_type_created_at ON webhook_events (event_type, created_at, id);
-- an event's deliveries, by its id alone or with its provider.
CREATE INDEX ix_webhook_events_event_id_provider ON webhook_events (event_id, provider);

CREATE TABLE destination_attempts (
    LIKE destination_attempts_unpartitioned
        INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING COMMENTS,
    PRIMARY KEY (job_id, attempt, attempted_at)
) PARTITION BY RANGE (attempted_at);

-- Creates the day partitions of `parent` (partitioned by range of a
-- timestamptz) for the UTC days `first` to `last`, named <parent>_pYYYYMMDD,
-- and returns how many it created; the days that have one are left alone.
-- `serve` calls it for the days ahead (src/db/partitions.rs), and the
-- conversion for the days of the rows it moves.
--
-- Why a table first and then ATTACH, not CREATE TABLE ... PARTITION OF:
-- the latter locks the parent ACCESS EXCLUSIVE, so deliveries would wait
-- for it; ATTACH takes SHARE UPDATE EXCLUSIVE, which inserts do not
-- conflict with, and checks the new table's rows, of which it has none.
-- Why the lock: replicas call it at once, and the second creator of a name
-- would fail; with the lock it waits, then finds the partition there.
CREATE FUNCTION create_day_partitions(parent regclass, first date, last date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    partition text;
    created integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('create_day_partitions'), parent::oid::integer);
    FOR day IN SELECT generate_series(first, last, interval '1 day')::date LOOP
        partition := format('%s_p%s', (SELECT relname FROM pg_class WHERE oid = parent), to_char(day, 'YYYYMMDD'));
        CONTINUE WHEN to_regclass(quote_ident(partition)) IS NOT NULL;
        EXECUTE format(
            'CREATE TABLE %I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)',
            partition, parent);
        -- Dates, not timestamps plus a day: a day is 24 hours in UTC
        -- whatever the session's time zone.
        EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
            parent, partition, day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;

-- How many days after today (UTC) the day partitions of `parent` reach:
-- what /metrics reports, so that an alert fires while days are left.
-- Negative: today has no partition, and deliveries fail.
CREATE FUNCTION day_partitions_ahead(parent regclass) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT coalesce(max(to_date(right(c.relname, 8), 'YYYYMMDD')) - (now() AT TIME ZONE 'UTC')::date, -1)
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = parent AND NOT i.inhdetachpending
$$;

-- Yesterday (a transaction begun before midnight inserts with its start
-- time) to tomorrow: enough for the deliveries that follow this commit,
-- until the process that migrated creates the days ahead (`serve` and
-- `migrate` do, right after migrating).
SELECT create_day_partitions(parent, (now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 1)
FROM unnest(ARRAY['webhook_events_daily', 'destination_attempts']::regclass[]) AS parent;

-- A new database, or one whose archive was empty, has nothing to move: the
-- old tables go now rather than at the next maintenance.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM webhook_events_unpartitioned) THEN
        DROP TABLE webhook_events_unpartitioned;
    END IF;
    IF NOT EXISTS (SELECT FROM destination_attempts_unpartitioned) THEN
        DROP TABLE destination_attempts_unpartitioned;
    END IF;
END
$$;
