-- What operators need (`webhook-inbox events`, `/admin`, `/metrics`).

-- Operators reprocess stored deliveries (`webhook-inbox events reprocess`,
-- `POST /admin/events/.../reprocess`). Each reprocess is archived as a new row
-- pointing at the row it reran, so the history of attempts stays visible.
--
-- No foreign key: retention purges rows by age and status in batches, so a
-- reprocess row may outlive the row it points at; the id then names a purged
-- row, and a foreign key would only make every purge batch slower.
ALTER TABLE webhook_events ADD COLUMN reprocess_of bigint;

COMMENT ON COLUMN webhook_events.reprocess_of IS
    'The archive row this delivery reprocessed (NULL: a delivery from the provider)';

-- /metrics counts dead emails at every scrape; partial, so the count reads
-- only the dead rows however many sent ones the outbox keeps.
CREATE INDEX ix_outbox_dead ON outbox (created_at) WHERE status = 'dead';
