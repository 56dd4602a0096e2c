//! The inbox: one verified delivery, one database transaction, so that each
//! event's side effects are committed if and only if its dedup row is
//! (DESIGN.md "One delivery, step by step").

mod archive;
mod effects;
mod error;
mod workers;

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use sqlx::{Connection, PgConnection};

use crate::event::Event;
use crate::handlers::HandlerError;
pub use effects::Effects;
use error::Failure;
pub use error::InboxError;
pub use workers::{Accepted, Received, Workers};

/// One verified delivery, ready to be recorded and applied.
#[derive(Debug)]
pub struct Delivery<'a> {
    /// The provider's name, the first half of the dedup key.
    pub provider: &'a str,
    /// The event inside the delivery.
    pub event: Event<'a>,
    /// The raw body: valid JSON, stored as received (as `jsonb`).
    pub payload: &'a str,
    /// The signature header as received.
    pub signature: &'a str,
    /// Which configured secret verified it.
    pub secret_index: Option<usize>,
    /// The request id the delivery arrived with, to join logs and archive.
    pub request_id: Option<&'a str>,
    /// The archive row an operator reprocesses with this delivery; `None`
    /// for a delivery from the provider.
    pub reprocess_of: Option<i64>,
}

/// What became of a delivery. Every variant has been committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// First delivery of the event: its side effects are committed.
    Processed {
        /// The archive row of this delivery.
        archive_id: i64,
    },
    /// The event was already processed: archived SKIPPED, nothing applied.
    Duplicate {
        /// The archive row of this delivery.
        archive_id: i64,
    },
    /// The handler failed: nothing applied, archived FAILED with the error,
    /// no dedup row, so the next delivery of the event tries again.
    Failed {
        /// The archive row of this delivery.
        archive_id: i64,
        /// What went wrong, as stored in `error_message`.
        error: String,
    },
}

/// Records a delivery and applies its event's `effects` exactly once.
///
/// Returns `Ok` only after COMMIT has returned. An `Err` is never a success:
/// nothing was committed, or (the connection broke around COMMIT) it is not
/// known whether it was, which the provider's retry settles.
pub async fn deliver(
    conn: &mut PgConnection,
    effects: &dyn Effects,
    delivery: &Delivery<'_>,
) -> Result<Outcome, InboxError> {
    if effects.handles(delivery.provider, &delivery.event.event_type) {
        apply_once(conn, effects, delivery).await
    } else {
        // Nothing can fail after the dedup insert, so one autocommitted
        // statement (archive + dedup) is the whole transaction.
        let (archive_id, first) = archive::record(conn, delivery).await?;
        Ok(recorded_outcome(archive_id, first))
    }
}

/// Records several deliveries of events without side effects, each as
/// [`deliver`] would, in input order, but in one statement with one commit.
/// A second delivery of an event in the same call, and every delivery of a
/// batch that fails (a payload PostgreSQL refuses, a lock wait past its
/// bound), is then recorded on its own, so each gets its own answer.
pub async fn deliver_together(
    conn: &mut PgConnection,
    deliveries: &[&Delivery<'_>],
) -> Vec<Result<Outcome, InboxError>> {
    let mut results: Vec<Option<Result<Outcome, InboxError>>> = deliveries.iter().map(|_| None).collect();
    let mut keys = std::collections::HashSet::new();
    let batch: Vec<usize> = (0..deliveries.len())
        .filter(|&i| keys.insert((deliveries[i].provider, deliveries[i].event.id.as_ref())))
        .collect();
    if batch.len() > 1 {
        let members: Vec<&Delivery<'_>> = batch.iter().map(|&i| deliveries[i]).collect();
        match archive::record_many(conn, &members).await.map_err(InboxError::from) {
            Ok(recorded) => {
                for (&i, (archive_id, first)) in batch.iter().zip(recorded) {
                    results[i] = Some(Ok(recorded_outcome(archive_id, first)));
                }
            }
            Err(InboxError::Unavailable(error)) => return answer_rest(results, &error),
            Err(_) => {} // one at a time below
        }
    }
    for (i, delivery) in deliveries.iter().enumerate() {
        if results[i].is_none() {
            match archive::record(&mut *conn, delivery).await.map_err(InboxError::from) {
                Err(InboxError::Unavailable(error)) => return answer_rest(results, &error),
                result => {
                    results[i] = Some(result.map(|(archive_id, first)| recorded_outcome(archive_id, first)))
                }
            }
        }
    }
    results.into_iter().map(|result| result.expect("every delivery was answered")).collect()
}

fn recorded_outcome(archive_id: i64, first: bool) -> Outcome {
    match first {
        true => Outcome::Processed { archive_id },
        false => Outcome::Duplicate { archive_id },
    }
}

/// Completes the answers once the connection is lost: the deliveries not
/// yet answered are not known to have committed, so none of them gets a 2xx.
fn answer_rest(
    results: Vec<Option<Result<Outcome, InboxError>>>,
    error: &sqlx::Error,
) -> Vec<Result<Outcome, InboxError>> {
    results
        .into_iter()
        .map(|result| result.unwrap_or_else(|| Err(InboxError::connection_lost(error))))
        .collect()
}

async fn apply_once(
    conn: &mut PgConnection,
    effects: &dyn Effects,
    delivery: &Delivery<'_>,
) -> Result<Outcome, InboxError> {
    // The savepoint is taken before the dedup insert: rolling back to it on a
    // handler error drops the dedup row and every partial effect at once,
    // and keeps the transaction alive to archive the failure. Sent with BEGIN
    // in one round trip.
    let mut tx = conn.begin_with("BEGIN; SAVEPOINT before_dedup").await?;
    let (archive_id, first) = archive::record(&mut *tx, delivery).await?;
    if !first {
        tx.commit().await?;
        return Ok(Outcome::Duplicate { archive_id });
    }
    // The call is inside the future too, so a panic before its first await is caught.
    let run = async { effects.run(delivery.provider, &mut tx, &delivery.event).await };
    let applied = AssertUnwindSafe(run)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(HandlerError::Panicked(panic_message(&*panic))));
    let applied = match applied {
        // A handler that swallowed a failed statement left the transaction
        // aborted, and COMMIT would then roll back without an error and be
        // answered as processed: releasing the savepoint fails instead.
        Ok(()) => sqlx::query("RELEASE SAVEPOINT before_dedup")
            .execute(&mut *tx)
            .await
            .map(drop)
            .map_err(HandlerError::Database),
        Err(error) => Err(error),
    };
    match applied {
        Ok(()) => {
            tx.commit().await?;
            Ok(Outcome::Processed { archive_id })
        }
        // The database was busy or gone, not the event broken: no FAILED
        // row (operators read those as broken events), nothing committed
        // (dropping the transaction rolls it back), 503 and a retry.
        Err(HandlerError::Database(error)) if is_transient(&error) => Err(match Failure::of(&error) {
            Failure::Unavailable => InboxError::Unavailable(error),
            _ => InboxError::Contended(error),
        }),
        Err(error) => {
            let error = error.to_string();
            sqlx::query("ROLLBACK TO SAVEPOINT before_dedup").execute(&mut *tx).await?;
            let archive_id = archive::record_failure(&mut *tx, delivery, &error).await?;
            tx.commit().await?;
            Ok(Outcome::Failed { archive_id, error })
        }
    }
}

/// Whether a handler's database error says nothing about the event.
fn is_transient(error: &sqlx::Error) -> bool {
    matches!(Failure::of(error), Failure::Unavailable | Failure::LockTimeout | Failure::Contention)
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}
