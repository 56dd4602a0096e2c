-- Lifecycles: the subscriptions and users projections with an ordering
-- guard, a ledger that refuses a second grant for the same cause, and the
-- outbox (DESIGN.md "Side effects").

-- The ordering guard: every projection row records the provider timestamp of
-- the event that last wrote it (`last_event_at`) and which event that was.
-- An upsert only overwrites a row whose `last_event_at` is older than the
-- incoming event's, inside the statement, so concurrent deliveries cannot
-- interleave a read and a write. Rows written before this migration count
-- as older than any event.

ALTER TABLE subscriptions
    -- [{"price_id": "pri_...", "quantity": 1}, ...]
    ADD COLUMN items                    jsonb       NOT NULL DEFAULT '[]',
    ADD COLUMN current_period_starts_at timestamptz,
    ADD COLUMN current_period_ends_at   timestamptz,
    -- Paddle's scheduled_change as sent ({"action", "effective_at", "resume_at"}), or NULL.
    ADD COLUMN scheduled_change         jsonb,
    ADD COLUMN canceled_at              timestamptz,
    ADD COLUMN last_event_at            timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN last_event_id            text;

ALTER TABLE users
    ADD COLUMN deleted_at    timestamptz,
    ADD COLUMN last_event_at timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN last_event_id text,
    -- A user first seen through its deletion has no known creation time.
    ALTER COLUMN created_at DROP NOT NULL;

-- The ledger: each grant names its cause, and the cause is unique, so the
-- ledger itself refuses a second grant for the same cause even if the dedup
-- table were bypassed (a replay under a new event id, an operator's reprocess).
--   subscription:<id>:initial   the credits of subscription.created
--   transaction:<txn_id>        the credits of a renewal
-- One subscription billing period is also granted at most once: the first
-- renewal-looking transaction of the period subscription.created already
-- granted does not grant it again.
ALTER TABLE credit_grants
    ADD COLUMN cause            text,
    ADD COLUMN period_starts_at timestamptz;
UPDATE credit_grants SET cause = 'event:' || event_id;
ALTER TABLE credit_grants
    ALTER COLUMN cause SET NOT NULL,
    ADD CONSTRAINT uq_credit_grants_cause UNIQUE (cause);
CREATE UNIQUE INDEX uq_credit_grants_subscription_period
    ON credit_grants (subscription_id, period_starts_at) WHERE period_starts_at IS NOT NULL;

-- The outbox: effects that leave the database (emails), written in the
-- delivery's transaction and sent by a worker. The recipient's address is
-- read from `users` when the email is sent, so the outbox holds no personal
-- data and a deleted user is never written to.
CREATE TABLE outbox (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- Why the email exists, e.g. user:<id>:welcome; one email per cause.
    cause           text        NOT NULL CONSTRAINT uq_outbox_cause UNIQUE,
    kind            text        NOT NULL CONSTRAINT ck_outbox_kind CHECK (kind IN ('welcome', 'downgrade')),
    user_id         text,
    subscription_id text,
    -- The event that enqueued it.
    event_id        text        NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
        CONSTRAINT ck_outbox_status CHECK (status IN ('pending', 'sent', 'dead')),
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- The lease of a worker's claim: the row is claimable again once it has
    -- passed, so a worker that crashed mid-send does not strand it.
    locked_until    timestamptz,
    -- Identifies the claim, so a worker whose lease expired cannot overwrite
    -- what a later claim recorded.
    claim_token     uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz
);

-- The worker's claim query: pending rows by due time. Partial, so it stays
-- as small as the backlog.
CREATE INDEX ix_outbox_pending_next_attempt_at ON outbox (next_attempt_at) WHERE status = 'pending';
-- user.deleted gives up the user's pending emails.
CREATE INDEX ix_outbox_user_id ON outbox (user_id) WHERE status = 'pending';
