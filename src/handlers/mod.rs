//! Handlers: the side effects of each event type. Every handler runs inside
//! the delivery's transaction, after the dedup row is inserted, so its writes
//! (projections, ledger, outbox) commit if and only if the event is recorded
//! as processed.
//!
//! One folder per domain, one file per entity; [`Handler::for_event`] is the
//! one place that says which event type goes where.

pub mod accounts;
pub mod billing;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use sqlx::PgConnection;

use crate::event::Event;
use crate::providers::{clerk::Clerk, paddle::Paddle};
use billing::PriceCredits;

/// Why a handler could not apply an event: the delivery is archived FAILED
/// and answered 500, so the provider retries it later.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The event lacks something the handler needs.
    #[error("{0}")]
    Invalid(String),
    /// A statement of the handler failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The handler panicked; the process keeps serving.
    #[error("handler panicked: {0}")]
    Panicked(String),
}

/// The event types that have side effects. Any other type is archived and
/// marked processed with no effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// Paddle `subscription.created`: the projection, and the initial credits.
    SubscriptionCreated,
    /// Paddle `subscription.updated`, `.activated`, `.trialing`, `.past_due`,
    /// `.paused`, `.resumed`, `.canceled`: the projection.
    SubscriptionChanged,
    /// Paddle `transaction.completed`: the credits of a renewal.
    TransactionCompleted,
    /// Clerk `user.created`: the projection, and the welcome email.
    UserCreated,
    /// Clerk `user.updated`: the projection.
    UserUpdated,
    /// Clerk `user.deleted`: soft delete, personal fields scrubbed.
    UserDeleted,
}

impl Handler {
    /// The handler for a provider's event type, if that type has side effects.
    pub fn for_event(provider: &str, event_type: &str) -> Option<Handler> {
        match (provider, event_type) {
            (Paddle::NAME, "subscription.created") => Some(Handler::SubscriptionCreated),
            (
                Paddle::NAME,
                "subscription.updated"
                | "subscription.activated"
                | "subscription.trialing"
                | "subscription.past_due"
                | "subscription.paused"
                | "subscription.resumed"
                | "subscription.canceled",
            ) => Some(Handler::SubscriptionChanged),
            (Paddle::NAME, "transaction.completed") => Some(Handler::TransactionCompleted),
            (Clerk::NAME, "user.created") => Some(Handler::UserCreated),
            (Clerk::NAME, "user.updated") => Some(Handler::UserUpdated),
            (Clerk::NAME, "user.deleted") => Some(Handler::UserDeleted),
            _ => None,
        }
    }
}

/// What handlers need to know beyond the event: the domain's configuration.
#[derive(Debug, Clone, Default)]
pub struct Handlers {
    /// Credits granted per unit of each Paddle price.
    pub price_credits: PriceCredits,
}

impl Handlers {
    /// Applies `handler` to `event` on the delivery's transaction.
    pub async fn apply(
        &self,
        handler: Handler,
        conn: &mut PgConnection,
        event: &Event<'_>,
    ) -> Result<(), HandlerError> {
        use billing::{subscriptions, transactions};
        match handler {
            Handler::SubscriptionCreated => {
                subscriptions::subscription_created(conn, event, &self.price_credits).await
            }
            Handler::SubscriptionChanged => subscriptions::subscription_changed(conn, event).await,
            Handler::TransactionCompleted => {
                transactions::transaction_completed(conn, event, &self.price_credits).await
            }
            Handler::UserCreated => accounts::users::user_created(conn, event).await,
            Handler::UserUpdated => accounts::users::user_updated(conn, event).await,
            Handler::UserDeleted => accounts::users::user_deleted(conn, event).await,
        }
    }
}

/// Deserializes the event's `data` object into the handler's view of it.
fn data<T: DeserializeOwned>(event: &Event<'_>) -> Result<T, HandlerError> {
    let data =
        event.data.ok_or_else(|| HandlerError::Invalid(format!("{} without data", event.event_type)))?;
    serde_json::from_str(data.get())
        .map_err(|e| HandlerError::Invalid(format!("{} with unexpected data: {e}", event.event_type)))
}

/// The provider time that orders the event against others about the same
/// entity: the envelope's (Paddle `occurred_at`, Clerk `timestamp`), else
/// the entity's own `updated_at`. Without either the event cannot be ordered,
/// and applying it blindly could roll newer state back, so it fails (and the
/// archive row says why).
fn ordered_at(event: &Event<'_>, updated_at: Option<DateTime<Utc>>) -> Result<DateTime<Utc>, HandlerError> {
    event.occurred_at.or(updated_at).ok_or_else(|| {
        HandlerError::Invalid(format!("{} without a timestamp to order it by", event.event_type))
    })
}

/// Says, without any payload, that an event was older than the state it
/// would have changed, so it changed nothing.
fn log_stale(event: &Event<'_>, entity: &str, entity_id: &str) {
    tracing::info!(
        event_id = %event.id,
        event_type = %event.event_type,
        entity,
        entity_id,
        occurred_at = ?event.occurred_at,
        "stale event: the projection is already newer; nothing changed"
    );
}
