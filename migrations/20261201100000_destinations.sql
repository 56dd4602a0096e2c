-- Forwarding events to the team's own application (README "Forward events
-- to your app"). The destinations themselves (URL, secret, events, ...) are
-- declared in the configuration file; the database holds what every replica
-- and the CLI must agree on: each destination's runtime state, the jobs, and
-- every attempt.

-- One row per destination name ever declared (written at startup).
CREATE TABLE destinations (
    name                 text        PRIMARY KEY,
    -- Paused by an operator: nothing is sent, jobs accumulate.
    paused_at            timestamptz,
    -- The receiver answered 410 Gone: nothing is sent until an operator resumes it.
    disabled_at          timestamptz,
    -- The circuit breaker: failed attempts in a row, and until when nothing
    -- is sent (NULL: closed; in the past: half open, one probe may go).
    consecutive_failures integer     NOT NULL DEFAULT 0,
    circuit_open_until   timestamptz,
    -- The rate limit's token bucket, shared by the replicas: tokens left as
    -- of tokens_at (a new row starts full).
    tokens               float8      NOT NULL DEFAULT 0,
    tokens_at            timestamptz NOT NULL DEFAULT '-infinity',
    created_at           timestamptz NOT NULL DEFAULT now()
);

-- One job per event and destination, inserted in the transaction that
-- records the event for the first time: a queue table of the engine
-- (src/queue/sql.rs: status, attempts, leases, claim tokens).
CREATE TABLE destination_jobs (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination     text        NOT NULL,
    provider        text        NOT NULL,
    event_id        text        NOT NULL,
    event_type      text        NOT NULL,
    -- The provider's timestamp of the event, forwarded in a header.
    occurred_at     timestamptz,
    -- The provider's raw request body, byte for byte (the archive's jsonb
    -- normalises it, and is purged sooner than a dead job is kept).
    body            bytea       NOT NULL,
    -- The entity the event is about, for destinations with ordering = "entity".
    ordering_key    text,
    status          text        NOT NULL DEFAULT 'pending'
        CONSTRAINT ck_destination_jobs_status CHECK (status IN ('pending', 'sent', 'dead')),
    -- Attempts ever made (each attempt's number), and those made before the
    -- last replay (the retry schedule counts from there).
    attempts        integer     NOT NULL DEFAULT 0,
    schedule_from   integer     NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    locked_until    timestamptz,
    claim_token     uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    -- One job per event and destination; event first, so that listing an
    -- event's jobs reads this index.
    CONSTRAINT uq_destination_jobs_event UNIQUE (event_id, provider, destination)
);

-- Claims: a destination's pending jobs by due time. Partial, so it stays as
-- small as the backlog.
CREATE INDEX ix_destination_jobs_pending
    ON destination_jobs (destination, next_attempt_at, id) WHERE status = 'pending';
-- Ordered destinations: an entity's pending jobs. Only their jobs have an
-- ordering_key, so the others never pay for this index.
CREATE INDEX ix_destination_jobs_entity
    ON destination_jobs (destination, ordering_key, id)
    WHERE status = 'pending' AND ordering_key IS NOT NULL;
-- Replaying a destination's dead jobs of a time range, and counting them.
CREATE INDEX ix_destination_jobs_dead ON destination_jobs (destination, created_at) WHERE status = 'dead';
-- Retention of sent jobs.
CREATE INDEX ix_destination_jobs_sent ON destination_jobs (sent_at) WHERE status = 'sent';

-- Every attempt. attempted_at is the time column a later range partitioning
-- can key on, and nothing refers to this table (no foreign key into it; nor
-- out of it, as jobs are purged on their own schedule).
CREATE TABLE destination_attempts (
    attempted_at  timestamptz NOT NULL,
    job_id        bigint      NOT NULL,
    -- The job's attempt number (replays count on).
    attempt       integer     NOT NULL,
    destination   text        NOT NULL,
    duration_ms   float8      NOT NULL,
    -- The answer's status; NULL when there was none (timeout, refused, reset).
    status_code   smallint,
    -- Why it failed (NULL: a 2xx).
    error         text,
    -- The first KiB of the answer's body.
    response_body text        NOT NULL,
    PRIMARY KEY (job_id, attempt, attempted_at)
);

-- Retention purges attempts by age.
CREATE INDEX ix_destination_attempts_attempted_at ON destination_attempts (attempted_at);
