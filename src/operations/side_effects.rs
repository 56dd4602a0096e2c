//! What an event changed, where the schema links it to the event: the
//! credit grants and emails it caused (their `event_id`), the subscription
//! and user it last wrote (`last_event_id`) or granted to.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use tracing::instrument;

/// A subscription the event wrote or granted credits on.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct LinkedSubscription {
    /// Paddle's subscription id.
    pub id: String,
    /// Its status now.
    pub status: String,
    /// The user it belongs to.
    pub user_id: Option<String>,
    /// Whether this event is the last one that wrote the row.
    pub last_written_by_event: bool,
}

/// A credit grant the event caused.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct LinkedGrant {
    /// Why it was granted (`subscription:<id>:initial`, `transaction:<id>`).
    pub cause: String,
    /// Credits granted.
    pub amount: i64,
    /// The subscription it was granted on.
    pub subscription_id: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// A user the event wrote, or emailed.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct LinkedUser {
    /// Clerk's user id.
    pub id: String,
    /// Set once the user was deleted (and scrubbed).
    pub deleted_at: Option<DateTime<Utc>>,
    /// Whether this event is the last one that wrote the row.
    pub last_written_by_event: bool,
}

/// An email the event enqueued.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct LinkedEmail {
    /// `welcome` or `downgrade`.
    pub kind: String,
    /// Why it exists (`user:<id>:welcome`).
    pub cause: String,
    /// `pending`, `sent` or `dead`.
    pub status: String,
    /// Attempts so far.
    pub attempts: i32,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When it was sent.
    pub sent_at: Option<DateTime<Utc>>,
}

/// An event's side effects, each kind possibly empty.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SideEffects {
    /// Subscriptions written or credited.
    pub subscriptions: Vec<LinkedSubscription>,
    /// Credit grants.
    pub grants: Vec<LinkedGrant>,
    /// Users written or emailed.
    pub users: Vec<LinkedUser>,
    /// Emails.
    pub emails: Vec<LinkedEmail>,
}

impl SideEffects {
    /// Whether nothing is linked to the event.
    pub fn is_empty(&self) -> bool {
        self.subscriptions.is_empty()
            && self.grants.is_empty()
            && self.users.is_empty()
            && self.emails.is_empty()
    }
}

/// The side effects linked to event `event_id`.
#[instrument(skip_all)]
pub async fn of_event(pool: &PgPool, event_id: &str) -> sqlx::Result<SideEffects> {
    let grants = sqlx::query_as(
        "SELECT cause, amount, subscription_id, created_at FROM credit_grants WHERE event_id = $1 ORDER BY created_at",
    )
    .bind(event_id)
    .fetch_all(pool)
    .await?;
    let subscriptions = sqlx::query_as(
        "SELECT id, status, user_id, last_event_id IS NOT DISTINCT FROM $1 AS last_written_by_event
         FROM subscriptions
         WHERE last_event_id = $1 OR id IN (SELECT subscription_id FROM credit_grants WHERE event_id = $1)
         ORDER BY id",
    )
    .bind(event_id)
    .fetch_all(pool)
    .await?;
    let emails = sqlx::query_as(
        "SELECT kind, cause, status, attempts, last_error, sent_at FROM outbox WHERE event_id = $1 ORDER BY created_at",
    )
    .bind(event_id)
    .fetch_all(pool)
    .await?;
    let users = sqlx::query_as(
        "SELECT id, deleted_at, last_event_id IS NOT DISTINCT FROM $1 AS last_written_by_event
         FROM users
         WHERE last_event_id = $1 OR id IN (SELECT user_id FROM outbox WHERE event_id = $1)
         ORDER BY id",
    )
    .bind(event_id)
    .fetch_all(pool)
    .await?;
    Ok(SideEffects { subscriptions, grants, users, emails })
}
