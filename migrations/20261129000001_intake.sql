-- The two tables of the intake, one job each (see DESIGN.md "Two tables, one job each").

-- The dedup: one small row per (provider, event_id), kept forever. Its UNIQUE
-- constraint is the only arbiter of "has this event been applied?".
CREATE TABLE processed_webhook_events (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider     text        NOT NULL,
    event_id     text        NOT NULL,
    event_type   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT uq_processed_webhook_events_provider_event_id UNIQUE (provider, event_id)
);

-- The archive: one row per verified delivery, with the payload as received.
-- Purged after a retention period without touching the dedup table.
CREATE TABLE webhook_events (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider          text        NOT NULL,
    event_id          text        NOT NULL,
    event_type        text        NOT NULL,
    payload           jsonb       NOT NULL,
    -- The signature header exactly as received (an HMAC, not a secret).
    signature         text        NOT NULL,
    processing_status text        NOT NULL DEFAULT 'PENDING'
        CONSTRAINT ck_webhook_events_processing_status
        CHECK (processing_status IN ('PENDING', 'PROCESSED', 'SKIPPED', 'FAILED')),
    error_message     text,
    -- Position (0-based) in the configured secret list of the secret that verified
    -- the delivery; never the secret itself.
    secret_index      smallint,
    -- Paddle's notification id: a manual replay from Paddle's dashboard keeps the
    -- event_id and gets a new notification_id.
    notification_id   text,
    request_id        text,
    -- When the provider says the event happened (Paddle occurred_at, Clerk timestamp).
    occurred_at       timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    processed_at      timestamptz
);

-- Serves the operator query
--   SELECT * FROM webhook_events
--   WHERE processing_status = 'FAILED' AND created_at > now() - interval '1 day';
-- Partial, so it stays as small as the number of failures.
CREATE INDEX ix_webhook_events_failed_created_at
    ON webhook_events (created_at) WHERE processing_status = 'FAILED';

-- Every delivery of one event, for tracing and reprocessing.
CREATE INDEX ix_webhook_events_provider_event_id
    ON webhook_events (provider, event_id);
