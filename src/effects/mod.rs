//! Effects: what each event changes in the domain. Every effect runs inside
//! the delivery's transaction, after its dedup row is inserted, so its
//! writes (projections, ledger, outbox) commit if and only if the event is
//! recorded as processed.
//!
//! One folder per domain, one file per entity. Each domain registers which
//! of its provider's event types have which effect ([`inbox::Effect`]);
//! [`all`] lists the domains. Adding effects for a new provider is a domain
//! folder and a line there.
//!
//! An effect is two halves ([`inbox::Effect`]): its input, read from the
//! event in Rust, and its writes, SQL over the deliveries recorded first,
//! which the inbox writes in the statement that records them. What an
//! effect says about a delivery (a stale event, a grant refused as a
//! repeat) are notes its SQL returns and the inbox logs, without payloads.

pub mod accounts;
pub mod billing;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::event::Event;
use crate::inbox::{self, EffectError};
use billing::PriceCredits;

/// The service's effects, configured: every domain's.
pub fn all(price_credits: PriceCredits) -> inbox::RoutingTable {
    let effects = inbox::RoutingTable::default();
    let effects = billing::register(effects, price_credits);
    accounts::register(effects)
}

/// Deserializes the event's `data` object into the effect's view of it.
fn data<'a, T: Deserialize<'a>>(event: &'a Event) -> Result<T, EffectError> {
    let data = event
        .data
        .as_deref()
        .ok_or_else(|| EffectError::Invalid(format!("{} without data", event.event_type)))?;
    serde_json::from_str(data.get())
        .map_err(|e| EffectError::Invalid(format!("{} with unexpected data: {e}", event.event_type)))
}

/// The time that orders the event against others about the same entity:
/// the provider's (Paddle `occurred_at`, Clerk `timestamp`), else the
/// entity's own `updated_at`, else when this service first received the
/// event.
///
/// Why the last resort, with a warning, rather than failing: an event with
/// no time would otherwise fail on every retry and every reprocess, and no
/// operator could ever apply it. Ordered by its arrival it applies once and
/// moves the projection forward; the risk, that it was in fact older than
/// what the projection holds, is the warning's to tell.
fn ordered_at(event: &Event, updated_at: Option<DateTime<Utc>>) -> DateTime<Utc> {
    event.occurred_at.or(updated_at).unwrap_or_else(|| {
        tracing::warn!(
            event_id = %event.id,
            event_type = %event.event_type,
            received_at = %event.received_at,
            "event carries no time of its own: ordered by when it was first received"
        );
        event.received_at
    })
}
