//! Handlers: the side effects of each event type. Every handler runs inside
//! the delivery's transaction, after the dedup row is inserted, so its writes
//! commit if and only if the event is recorded as processed.

pub mod accounts;
pub mod billing;

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
    /// Paddle `subscription.created`: the subscription row and its first credits.
    SubscriptionCreated,
    /// Clerk `user.created`: the user row.
    UserCreated,
}

impl Handler {
    /// The handler for a provider's event type, if that type has side effects.
    pub fn for_event(provider: &str, event_type: &str) -> Option<Handler> {
        match (provider, event_type) {
            (Paddle::NAME, "subscription.created") => Some(Handler::SubscriptionCreated),
            (Clerk::NAME, "user.created") => Some(Handler::UserCreated),
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
        match handler {
            Handler::SubscriptionCreated => {
                billing::subscription_created(conn, event, &self.price_credits).await
            }
            Handler::UserCreated => accounts::user_created(conn, event).await,
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
