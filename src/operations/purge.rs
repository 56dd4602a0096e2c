//! Purging the archive: rows past their retention age deleted in small
//! batches. The dedup table is never touched, so an event purged from the
//! archive is still answered as a duplicate when a provider replays it.

use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use super::age::Age;

/// Rows deleted per statement: each batch is a short transaction that locks
/// at most this many rows, so a purge never blocks anything for long.
pub const BATCH_SIZE: i64 = 1000;

/// The condition on a purgeable row; `$1` and `$2` are the ages in seconds
/// of other rows and of FAILED rows (NULL: FAILED rows are kept). The clock
/// is the database's, the same for every replica.
macro_rules! purgeable {
    () => {
        "CASE WHEN processing_status = 'FAILED'
              THEN $2::float8 IS NOT NULL AND created_at < now() - make_interval(secs => $2::float8)
              ELSE created_at < now() - make_interval(secs => $1::float8)
         END"
    };
}

/// How old archive rows must be to be purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    older_than: Age,
    failed_older_than: Option<Age>,
}

/// A retention policy that would lose something it should keep.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    /// A zero age would purge every row at once.
    #[error("a retention age of zero would purge the whole archive")]
    Zero,
    /// FAILED rows are kept longer, so that nobody loses a failure before
    /// looking at it.
    #[error("FAILED rows must be kept at least as long as the others ({failed} is shorter than {others})")]
    FailedShorter {
        /// The age asked for FAILED rows.
        failed: Age,
        /// The age asked for other rows.
        others: Age,
    },
}

impl RetentionPolicy {
    /// Purges PROCESSED and SKIPPED rows older than `older_than`, and FAILED
    /// rows older than `failed_older_than` (`None` or zero: never).
    pub fn new(older_than: Age, failed_older_than: Option<Age>) -> Result<Self, PolicyError> {
        let failed_older_than = failed_older_than.filter(|age| !age.is_zero());
        if older_than.is_zero() {
            return Err(PolicyError::Zero);
        }
        if let Some(failed) = failed_older_than.filter(|failed| *failed < older_than) {
            return Err(PolicyError::FailedShorter { failed, others: older_than });
        }
        Ok(RetentionPolicy { older_than, failed_older_than })
    }

    fn bind_ages(&self) -> (f64, Option<f64>) {
        (self.older_than.seconds().into(), self.failed_older_than.map(|age| age.seconds().into()))
    }
}

/// Rows purged (or, in a dry run, purgeable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Purged {
    /// PROCESSED and SKIPPED rows.
    pub processed_or_skipped: u64,
    /// FAILED rows.
    pub failed: u64,
}

impl Purged {
    /// All rows.
    pub fn total(&self) -> u64 {
        self.processed_or_skipped + self.failed
    }

    fn from_counts((others, failed): (i64, i64)) -> Self {
        Purged { processed_or_skipped: others as u64, failed: failed as u64 }
    }
}

/// Deletes every row the policy says is old enough, [`BATCH_SIZE`] at a
/// time, until none is left or `stop` is cancelled (checked between batches,
/// so a batch always finishes).
///
/// Safe to run from several processes at once: each batch locks the rows it
/// deletes with `SKIP LOCKED`, so concurrent purges split the work instead
/// of waiting on each other.
#[instrument(skip_all)]
pub async fn purge(
    pool: &PgPool,
    policy: &RetentionPolicy,
    stop: &CancellationToken,
) -> sqlx::Result<Purged> {
    let (older_than, failed_older_than) = policy.bind_ages();
    let mut purged = Purged::default();
    loop {
        let batch = Purged::from_counts(
            sqlx::query_as(concat!(
                "WITH doomed AS (
                     SELECT id FROM webhook_events WHERE ",
                purgeable!(),
                "    ORDER BY id LIMIT $3
                     FOR UPDATE SKIP LOCKED
                 ), deleted AS (
                     DELETE FROM webhook_events w USING doomed WHERE w.id = doomed.id
                     RETURNING w.processing_status
                 )
                 SELECT count(*) FILTER (WHERE processing_status <> 'FAILED'),
                        count(*) FILTER (WHERE processing_status = 'FAILED')
                 FROM deleted"
            ))
            .bind(older_than)
            .bind(failed_older_than)
            .bind(BATCH_SIZE)
            .fetch_one(pool)
            .await?,
        );
        purged.processed_or_skipped += batch.processed_or_skipped;
        purged.failed += batch.failed;
        tracing::debug!(rows = batch.total(), "purged a batch");
        if batch.total() < BATCH_SIZE as u64 || stop.is_cancelled() {
            return Ok(purged);
        }
    }
}

/// Counts the rows [`purge`] would delete now, deleting nothing.
#[instrument(skip_all)]
pub async fn count_purgeable(pool: &PgPool, policy: &RetentionPolicy) -> sqlx::Result<Purged> {
    let (older_than, failed_older_than) = policy.bind_ages();
    sqlx::query_as(concat!(
        "SELECT count(*) FILTER (WHERE processing_status <> 'FAILED'),
                count(*) FILTER (WHERE processing_status = 'FAILED')
         FROM webhook_events WHERE ",
        purgeable!()
    ))
    .bind(older_than)
    .bind(failed_older_than)
    .fetch_one(pool)
    .await
    .map(Purged::from_counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_rows_are_never_kept_shorter_than_the_others() {
        let days = Age::days;
        assert!(RetentionPolicy::new(days(90), Some(days(180))).is_ok());
        assert!(RetentionPolicy::new(days(90), Some(days(90))).is_ok());
        assert!(RetentionPolicy::new(days(90), None).is_ok());
        assert!(RetentionPolicy::new(days(90), Some(days(0))).is_ok(), "zero keeps FAILED rows forever");
        assert_eq!(
            RetentionPolicy::new(days(90), Some(days(30))),
            Err(PolicyError::FailedShorter { failed: days(30), others: days(90) })
        );
        assert_eq!(RetentionPolicy::new(days(0), Some(days(30))), Err(PolicyError::Zero));
    }
}
