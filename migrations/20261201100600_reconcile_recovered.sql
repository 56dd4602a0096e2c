-- Events recovered by reconciliation, per provider, over every run (from
-- any replica or the CLI): `/metrics` reads it at scrape time.
ALTER TABLE reconciliation_state ADD COLUMN recovered_total bigint NOT NULL DEFAULT 0;
