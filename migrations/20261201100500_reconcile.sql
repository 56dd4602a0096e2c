-- Reconciliation with the providers' event APIs (`webhook-inbox reconcile`).

-- Where each archived delivery came from: a provider's request (`webhook`),
-- an event read back from the provider's API (`api`), or an operator's
-- reprocess of an archived row (`reprocess`). Only a webhook carries a
-- signature; an API row carries the API's request id in `request_id`.
ALTER TABLE webhook_events
    ADD COLUMN source text NOT NULL DEFAULT 'webhook'
        CONSTRAINT ck_webhook_events_source CHECK (source IN ('webhook', 'api', 'reprocess'));
UPDATE webhook_events SET source = 'reprocess' WHERE reprocess_of IS NOT NULL;
ALTER TABLE webhook_events ALTER COLUMN signature DROP NOT NULL;

COMMENT ON COLUMN webhook_events.source IS
    'webhook: a verified request; api: read from the provider''s event API; reprocess: an operator''s rerun';

-- One row per provider reconciled: where the next run starts (the
-- high-water mark) and what the last run did.
CREATE TABLE reconciliation_state (
    provider         text        PRIMARY KEY,
    -- The provider's own cursor to start after (Paddle: an event id), if it pages by id.
    cursor           text,
    -- The time of the newest event read (Stripe: the next run reads from this, less the overlap).
    mark_at          timestamptz,
    last_started_at  timestamptz,
    last_finished_at timestamptz,
    -- ok or failed; NULL while the first run is in progress.
    last_result      text
        CONSTRAINT ck_reconciliation_state_last_result CHECK (last_result IN ('ok', 'failed')),
    last_error       text,
    -- The last run's counts (pages, seen, already_recorded, recovered, failed, ...).
    last_summary     jsonb
);
