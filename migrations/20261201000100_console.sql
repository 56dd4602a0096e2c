-- The operator console (/console): its sessions, the audit of what operators
-- did through it, and the indexes its pages read (src/http/console/,
-- src/operations/overview.rs). Measured on a million-row archive in
-- bench/RESULTS.md ("Console").

-- Server-side sessions, so that sign-out and expiry end a session on every
-- replica at once. The cookie holds a random secret; only its SHA-256 digest
-- is stored, so a copy of this table signs nobody in.
CREATE TABLE console_sessions (
    token_digest bytea       PRIMARY KEY,
    -- Names the session in the audit without revealing the secret.
    id           uuid        NOT NULL DEFAULT gen_random_uuid() CONSTRAINT uq_console_sessions_id UNIQUE,
    -- Every state-changing form carries it (the CSRF token).
    csrf_token   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- What operators did: one row per action and event, shown on the event's page.
CREATE TABLE console_audit (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    -- Who: `console session <id>` (console_sessions.id, kept after the session ends).
    actor      text        NOT NULL,
    -- What: `reprocess`, `bulk reprocess`.
    action     text        NOT NULL,
    provider   text        NOT NULL,
    event_id   text        NOT NULL,
    -- The archive row acted on, and what came of it (new row, status, error).
    archive_id bigint      NOT NULL,
    outcome    jsonb       NOT NULL
);
CREATE INDEX ix_console_audit_provider_event_id ON console_audit (provider, event_id);

-- The overview: per provider, deliveries by outcome in the last hour and
-- day, and the last delivery (a silent provider shows as a long time since).
-- Index-only: the status is carried in the index.
--
-- Building these takes a lock that makes deliveries wait for as long as the
-- build lasts; on a large archive create them beforehand CONCURRENTLY (as for
-- 20261130000300_retention_index.sql) and this migration finds them there.
SET LOCAL statement_timeout = 0;
CREATE INDEX IF NOT EXISTS ix_webhook_events_provider_created_at
    ON webhook_events (provider, created_at) INCLUDE (processing_status);

-- The events list, newest first, filtered by type, or by FAILED (rare: the
-- primary key walked backwards would read the whole archive to fill a page).
CREATE INDEX IF NOT EXISTS ix_webhook_events_event_type_id ON webhook_events (event_type, id);
CREATE INDEX IF NOT EXISTS ix_webhook_events_failed_id ON webhook_events (id) WHERE processing_status = 'FAILED';

-- The overview's count of FAILED events not applied since: distinct events,
-- straight from the index, each checked against the dedup table.
CREATE INDEX IF NOT EXISTS ix_webhook_events_failed_event
    ON webhook_events (provider, event_id) WHERE processing_status = 'FAILED';

-- An event's deliveries by its id alone (the list's event id filter) as
-- well as by provider and id: the same index, its columns swapped, so no
-- index is added to the archive's writes.
CREATE INDEX IF NOT EXISTS ix_webhook_events_event_id_provider ON webhook_events (event_id, provider);
DROP INDEX IF EXISTS ix_webhook_events_provider_event_id;

-- An event's side effects, for its page.
CREATE INDEX IF NOT EXISTS ix_credit_grants_event_id ON credit_grants (event_id);
CREATE INDEX IF NOT EXISTS ix_outbox_event_id ON outbox (event_id);
CREATE INDEX IF NOT EXISTS ix_subscriptions_last_event_id ON subscriptions (last_event_id);
CREATE INDEX IF NOT EXISTS ix_users_last_event_id ON users (last_event_id);
