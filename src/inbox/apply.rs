//! The applying lane's work: a delivery whose event has side effects, in
//! one transaction with its archive and dedup rows.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use sqlx::PgConnection;

use super::error::ErrorClass;
use super::{EffectError, InboxError, Recorded, ToApply, archive};

/// Records a delivery and applies its event's effect exactly once.
///
/// Returns `Ok` only after COMMIT has returned. An `Err` is never a success:
/// nothing was committed, or (the connection broke around COMMIT) it is not
/// known whether it was, which the provider's retry settles.
///
/// The transaction is begun and ended by hand, with the statements that
/// open and close it sent together (BEGIN with the savepoint, the
/// savepoint's release with COMMIT): two round trips fewer than sqlx's
/// `Transaction`, which sends each alone. Hence not cancel safe: a future
/// dropped before it returns leaves `conn` inside the transaction, so its
/// holder must then close `conn` (the delivery workers close a connection
/// whose delivery they abandoned; reconciliation's own connection closes
/// with it; reprocessing runs in a task of its own, never dropped).
pub async fn apply(conn: &mut PgConnection, to_apply: &ToApply) -> Result<Recorded, InboxError> {
    // The savepoint is taken before the dedup insert: rolling back to it on an
    // effect's error drops the dedup row and every partial write at once,
    // and keeps the transaction alive to archive the failure. Sent with BEGIN
    // in one round trip, the delivery's first: a connection found broken
    // there is stale, and nothing of the delivery ran.
    sqlx::raw_sql("BEGIN; SAVEPOINT before_dedup")
        .execute(&mut *conn)
        .await
        .map_err(InboxError::at_first_statement)?;
    match decide(&mut *conn, to_apply).await {
        Ok(outcome) => {
            if let Recorded::Processed { .. } = outcome {
                to_apply.forwards().committed();
            }
            Ok(outcome)
        }
        // Rolled back here: the worker keeps its connection, and a session
        // left idle in a transaction is ended by
        // `idle_in_transaction_session_timeout` under it. A rollback that
        // fails means the connection is gone (503, and the worker replaces it).
        Err(error) => match sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await {
            Err(lost) if !error.lost_connection() => Err(InboxError::Unavailable(Arc::new(lost))),
            _ => Err(error),
        },
    }
}

/// Everything of [`apply`] inside its transaction, COMMIT included: the
/// committed outcome, or why the transaction must roll back.
async fn decide(conn: &mut PgConnection, to_apply: &ToApply) -> Result<Recorded, InboxError> {
    let delivery = to_apply.delivery();
    // The jobs go in with the dedup row: the savepoint's rollback drops them too.
    let (archive_id, first) = archive::record(&mut *conn, delivery, to_apply.forwards()).await?;
    if !first {
        sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
        return Ok(Recorded::Duplicate { archive_id });
    }
    // The call is inside the future too, so a panic before its first await is caught.
    let run = async { to_apply.apply_effect(&mut *conn).await };
    let applied = AssertUnwindSafe(run)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(EffectError::Panicked(panic_message(&*panic))));
    let error = match applied {
        // An effect that swallowed a failed statement left the transaction
        // aborted, and COMMIT would then roll back without an error and be
        // answered as processed: releasing the savepoint fails instead, and
        // the COMMIT sent with it is then not run.
        Ok(()) => match sqlx::raw_sql("RELEASE SAVEPOINT before_dedup; COMMIT").execute(&mut *conn).await {
            Ok(_) => return Ok(Recorded::Processed { archive_id }),
            Err(error) if is_transient(&error) => EffectError::Database(error),
            // Which of the two failed: if the savepoint is still there to
            // roll back to, the release did (the effect's failure, archived
            // below); if not, COMMIT did, and nothing was committed.
            Err(error) => match sqlx::raw_sql("ROLLBACK TO SAVEPOINT before_dedup").execute(&mut *conn).await
            {
                Ok(_) => {
                    return record_failure(conn, to_apply, EffectError::Database(error).to_string()).await;
                }
                Err(_) => return Err(InboxError::from(error)),
            },
        },
        Err(error) => error,
    };
    match error {
        // The database was busy or gone, not the event broken: no FAILED
        // row (operators read those as broken events), nothing committed
        // (the caller rolls back), 503 and a retry.
        EffectError::Database(error) if is_transient(&error) => Err(match ErrorClass::of(&error) {
            ErrorClass::Unavailable => InboxError::Unavailable(Arc::new(error)),
            _ => InboxError::Contended(error),
        }),
        error => {
            sqlx::raw_sql("ROLLBACK TO SAVEPOINT before_dedup").execute(&mut *conn).await?;
            record_failure(conn, to_apply, error.to_string()).await
        }
    }
}

/// Archives the delivery FAILED with `error` and commits, once the
/// savepoint's rollback removed its dedup row and writes.
async fn record_failure(
    conn: &mut PgConnection,
    to_apply: &ToApply,
    error: String,
) -> Result<Recorded, InboxError> {
    let archive_id = archive::record_failure(&mut *conn, to_apply.delivery(), &error).await?;
    sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
    Ok(Recorded::Failed { archive_id, error })
}

/// Whether an effect's database error says nothing about the event.
fn is_transient(error: &sqlx::Error) -> bool {
    matches!(
        ErrorClass::of(error),
        ErrorClass::Unavailable | ErrorClass::LockTimeout | ErrorClass::Contention
    )
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}
