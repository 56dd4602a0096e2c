//! Reprocessing: a stored delivery run again through the same lane as a
//! live one (`inbox::deliver`), archived as a new row pointing at the one it
//! reran.

use std::panic::AssertUnwindSafe;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use serde::Serialize;
use sqlx::PgPool;
use tracing::{Instrument, Span, instrument};

use crate::event::{Event, EventError, Payload};
use crate::inbox::{self, Delivery, InboxError, Recorded, RoutingTable, Source};
use crate::providers;
use crate::telemetry;

/// Why a row could not be reprocessed; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum ReprocessError {
    /// No archive row has this id (never, or purged since).
    #[error("archived event {0} not found")]
    NotFound(i64),
    /// The stored payload no longer reads as an event of its provider.
    #[error("the stored payload is not a valid event: {0}")]
    Unreadable(#[from] EventError),
    /// The transaction could not run (database unavailable, busy...).
    #[error(transparent)]
    Inbox(#[from] InboxError),
}

impl From<sqlx::Error> for ReprocessError {
    fn from(error: sqlx::Error) -> Self {
        ReprocessError::Inbox(error.into())
    }
}

/// What one reprocess did. Like a live delivery's outcome, it is committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reprocessed {
    /// The archive row that was reprocessed.
    pub reprocess_of: i64,
    /// The new archive row this reprocess wrote.
    pub archive_id: i64,
    /// The row's provider.
    pub provider: String,
    /// The row's event id.
    pub event_id: String,
    /// PROCESSED (applied now), SKIPPED (already applied: nothing done) or
    /// FAILED (the effect failed again: nothing applied).
    pub status: &'static str,
    /// The effect's error, for FAILED.
    pub error: Option<String>,
}

/// Counts of a bulk reprocess.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Events applied by this run.
    pub processed: usize,
    /// Events already applied meanwhile (by a provider retry, say).
    pub skipped: usize,
    /// Events whose effect failed again.
    pub failed: usize,
}

impl Summary {
    /// Counts one result.
    pub fn add(&mut self, reprocessed: &Reprocessed) {
        match reprocessed.status {
            "PROCESSED" => self.processed += 1,
            "SKIPPED" => self.skipped += 1,
            _ => self.failed += 1,
        }
    }
}

/// A stored row, as reprocessing reads it.
#[derive(sqlx::FromRow)]
struct Stored {
    provider: String,
    event_id: String,
    event_type: String,
    payload: String,
    signature: Option<String>,
    secret_index: Option<i16>,
    /// When the event's first archived delivery arrived.
    first_received_at: DateTime<Utc>,
}

/// Runs the stored payload of archive row `archive_id` through
/// [`inbox::deliver`], with no signature check (it was verified on
/// arrival). The new archive row carries `request_id` and points at
/// `archive_id`.
///
/// The event is read back by its provider's own event format, with the id
/// and type the archive recorded; an event already applied is recorded
/// SKIPPED and changes nothing, exactly as a provider's duplicate would.
#[instrument(skip_all, fields(request_id, reprocess_of = archive_id, provider, event_id))]
pub async fn reprocess(
    pool: &PgPool,
    routing: &RoutingTable,
    archive_id: i64,
    request_id: Option<&str>,
) -> Result<Reprocessed, ReprocessError> {
    // The fields a delivery's request span has, so logs read alike.
    Span::current().record("request_id", request_id);
    let stored: Stored = sqlx::query_as(
        "SELECT provider, event_id, event_type, payload::text AS payload, signature, secret_index,
                (SELECT min(created_at) FROM webhook_events AS first
                 WHERE first.provider = w.provider AND first.event_id = w.event_id) AS first_received_at
         FROM webhook_events AS w WHERE id = $1",
    )
    .bind(archive_id)
    .fetch_optional(pool)
    .await?
    .ok_or(ReprocessError::NotFound(archive_id))?;
    Span::current().record("provider", stored.provider.as_str()).record("event_id", stored.event_id.as_str());

    let payload = Payload::try_from(stored.payload)?;
    let event =
        providers::format_of(&stored.provider).read_stored(&stored.event_id, &stored.event_type, &payload)?;
    let delivery = Delivery {
        provider: stored.provider.clone(),
        event: Event { received_at: stored.first_received_at, ..event },
        payload,
        source: Source::Reprocess {
            of: archive_id,
            signature: stored.signature,
            secret_index: stored.secret_index.map(|i| i as usize),
        },
        request_id: request_id.map(str::to_owned),
        traceparent: telemetry::context::traceparent(&Span::current()),
    };
    let routed = routing.route(delivery);
    let mut conn = pool.acquire().await.map_err(InboxError::from)?;
    // In a task of its own, run to its end even if this caller stops waiting
    // (an admin client that disconnected): `inbox::deliver` must not be
    // dropped half way, which would leave the pooled connection inside its
    // transaction; for the same reason a panic in it closes the connection.
    let delivered = tokio::spawn(
        async move {
            let delivered = AssertUnwindSafe(inbox::deliver(&mut conn, &routed)).catch_unwind().await;
            delivered.unwrap_or_else(|panic| {
                conn.close_on_drop();
                std::panic::resume_unwind(panic)
            })
        }
        .in_current_span(),
    )
    .await
    .unwrap_or_else(|stopped| match stopped.try_into_panic() {
        Ok(panic) => std::panic::resume_unwind(panic),
        // The runtime is shutting down.
        Err(_) => Err(InboxError::Overloaded),
    });
    let (new_id, status, error) = match delivered? {
        Recorded::Processed { archive_id } => (archive_id, "PROCESSED", None),
        Recorded::Duplicate { archive_id } => (archive_id, "SKIPPED", None),
        Recorded::Failed { archive_id, error } => (archive_id, "FAILED", Some(error)),
    };
    // The error text may quote the payload: it is in the result and the
    // archive row, never in the log.
    tracing::info!(archive_id = new_id, status, "reprocessed");
    Ok(Reprocessed {
        reprocess_of: archive_id,
        archive_id: new_id,
        provider: stored.provider,
        event_id: stored.event_id,
        status,
        error,
    })
}
