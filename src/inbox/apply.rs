//! The applying lane's work: a delivery whose event has side effects, in
//! one transaction with its archive and dedup rows.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use sqlx::{Connection, PgConnection};

use super::error::Failure;
use super::{EffectError, InboxError, Outcome, ToApply, archive};

/// Records a delivery and applies its event's effect exactly once.
///
/// Returns `Ok` only after COMMIT has returned. An `Err` is never a success:
/// nothing was committed, or (the connection broke around COMMIT) it is not
/// known whether it was, which the provider's retry settles.
pub async fn apply(conn: &mut PgConnection, to_apply: &ToApply) -> Result<Outcome, InboxError> {
    // The savepoint is taken before the dedup insert: rolling back to it on an
    // effect's error drops the dedup row and every partial write at once,
    // and keeps the transaction alive to archive the failure. Sent with BEGIN
    // in one round trip, the delivery's first: a connection found broken
    // there is stale, and nothing of the delivery ran.
    let mut tx =
        conn.begin_with("BEGIN; SAVEPOINT before_dedup").await.map_err(InboxError::at_first_statement)?;
    match decide(&mut tx, to_apply).await {
        Ok(outcome) => {
            tx.commit().await?;
            if let Outcome::Processed { .. } = outcome {
                to_apply.forwards().committed();
            }
            Ok(outcome)
        }
        // Rolled back here, not left to the drop, which only queues the
        // ROLLBACK for the connection's next use: the worker keeps its
        // connection, and a session left idle in an aborted transaction is
        // ended by `idle_in_transaction_session_timeout` under it. A
        // rollback that fails means the connection is gone (503, and the
        // worker replaces it).
        Err(error) => match tx.rollback().await {
            Err(lost) if !error.lost_connection() => Err(InboxError::Unavailable(Arc::new(lost))),
            _ => Err(error),
        },
    }
}

/// Everything of [`apply`] inside its transaction but the COMMIT: the
/// outcome to commit, or why the transaction must roll back.
async fn decide(tx: &mut PgConnection, to_apply: &ToApply) -> Result<Outcome, InboxError> {
    let delivery = to_apply.delivery();
    // The jobs go in with the dedup row: the savepoint's rollback drops them too.
    let (archive_id, first) = archive::record(&mut *tx, delivery, to_apply.forwards()).await?;
    if !first {
        return Ok(Outcome::Duplicate { archive_id });
    }
    // The call is inside the future too, so a panic before its first await is caught.
    let run = async { to_apply.apply_effect(&mut *tx).await };
    let applied = AssertUnwindSafe(run)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(EffectError::Panicked(panic_message(&*panic))));
    let applied = match applied {
        // An effect that swallowed a failed statement left the transaction
        // aborted, and COMMIT would then roll back without an error and be
        // answered as processed: releasing the savepoint fails instead.
        Ok(()) => sqlx::query("RELEASE SAVEPOINT before_dedup")
            .execute(&mut *tx)
            .await
            .map(drop)
            .map_err(EffectError::Database),
        Err(error) => Err(error),
    };
    match applied {
        Ok(()) => Ok(Outcome::Processed { archive_id }),
        // The database was busy or gone, not the event broken: no FAILED
        // row (operators read those as broken events), nothing committed
        // (the caller rolls back), 503 and a retry.
        Err(EffectError::Database(error)) if is_transient(&error) => Err(match Failure::of(&error) {
            Failure::Unavailable => InboxError::Unavailable(Arc::new(error)),
            _ => InboxError::Contended(error),
        }),
        Err(error) => {
            let error = error.to_string();
            sqlx::query("ROLLBACK TO SAVEPOINT before_dedup").execute(&mut *tx).await?;
            let archive_id = archive::record_failure(&mut *tx, delivery, &error).await?;
            Ok(Outcome::Failed { archive_id, error })
        }
    }
}

/// Whether an effect's database error says nothing about the event.
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
