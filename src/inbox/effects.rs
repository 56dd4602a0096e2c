//! What the inbox applies for an event: the domain's handlers in the service,
//! anything else a test needs to prove the inbox's guarantees with.

use futures_util::future::BoxFuture;
use sqlx::PgConnection;

use crate::event::Event;
use crate::handlers::{Handler, HandlerError, Handlers};

/// The side effects of events, as the inbox sees them: which events have
/// some, and how to apply them on the delivery's transaction.
///
/// Why a trait: the inbox's promises (effects commit if and only if the dedup
/// row does; a failing or panicking handler leaves a FAILED row and nothing
/// else) hold whatever the effects are. A test proves them with effects the
/// domain must never have, such as a handler that panics.
pub trait Effects: Send + Sync {
    /// Whether events of `event_type` from `provider` have side effects.
    fn handles(&self, provider: &str, event_type: &str) -> bool;

    /// Applies the side effects of `event` from `provider` on `conn`, which
    /// is inside the delivery's transaction. Called only for handled events.
    fn run<'a>(
        &'a self,
        provider: &'a str,
        conn: &'a mut PgConnection,
        event: &'a Event<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>>;
}

/// The service's effects: the handler of each event type.
impl Effects for Handlers {
    fn handles(&self, provider: &str, event_type: &str) -> bool {
        Handler::for_event(provider, event_type).is_some()
    }

    fn run<'a>(
        &'a self,
        provider: &'a str,
        conn: &'a mut PgConnection,
        event: &'a Event<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            match Handler::for_event(provider, &event.event_type) {
                Some(handler) => self.apply(handler, conn, event).await,
                None => Ok(()),
            }
        })
    }
}
