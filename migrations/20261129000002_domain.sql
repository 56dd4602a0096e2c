-- The side effects of the first handlers (DESIGN.md "Side effects").

-- Paddle subscriptions, as a projection of subscription.* events.
CREATE TABLE subscriptions (
    id          text        PRIMARY KEY,
    customer_id text        NOT NULL,
    user_id     text,
    status      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The credit ledger: one row per grant; a user's balance is a sum.
CREATE TABLE credit_grants (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The event that caused the grant.
    event_id        text        NOT NULL,
    subscription_id text        NOT NULL,
    user_id         text,
    amount          bigint      NOT NULL CHECK (amount > 0),
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX ix_credit_grants_user_id ON credit_grants (user_id);

-- Clerk users, as a projection of user.* events.
CREATE TABLE users (
    id         text        PRIMARY KEY,
    email      text,
    first_name text,
    last_name  text,
    created_at timestamptz NOT NULL
);
