//! Purging the archive: rows past their retention age go. PROCESSED and
//! SKIPPED rows and forwarding attempts a day at a time, by dropping the
//! day's partition (`db::partitions`); FAILED rows, kept longer in a table
//! of their own, and forwarding jobs, which are a queue, in small batches
//! of deletes. The dedup table is never touched, so an event purged from
//! the archive is still answered as a duplicate when a provider replays it.
//! Forwarding is purged on the same ages: attempts and sent jobs like
//! archive rows, dead jobs like FAILED ones; pending jobs never.

use std::sync::LazyLock;

use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use super::age::Age;
use crate::db::partitions::{self, DayPartitioned};
use crate::db::statement::delete_oldest;
use crate::destinations::store::jobs::{self, Purgeable};

/// Rows deleted per statement: each batch is a short transaction that locks
/// at most this many rows, so a purge never blocks anything for long.
pub const BATCH_SIZE: i64 = 1000;

/// FAILED archive rows' batch ([`delete_oldest`]). They are deleted from
/// their partition, `webhook_events_failed`, by name: through the
/// partitioned table, the join back on `id` would look for each id in
/// every day's partition too.
static FAILED: LazyLock<String> =
    LazyLock::new(|| delete_oldest("webhook_events_failed", "id", "true", "created_at"));

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
    /// PROCESSED and SKIPPED rows, in the days dropped.
    pub processed_or_skipped: u64,
    /// The days of PROCESSED and SKIPPED rows dropped: their partitions.
    pub days: u64,
    /// FAILED rows.
    pub failed: u64,
}

impl Purged {
    /// All rows.
    pub fn total(&self) -> u64 {
        self.processed_or_skipped + self.failed
    }
}

/// Deletes every row the policy says is old enough, until none is left or
/// `stop` is cancelled (checked between a day or a batch and the next, so
/// one always finishes): PROCESSED and SKIPPED rows by the day (a day goes
/// once it ended `older_than` ago, so a row is kept at least that long and
/// at most a day more), FAILED rows [`BATCH_SIZE`] at a time, oldest
/// first.
///
/// One process at a time runs it: the caller holds the upkeep's lock
/// (`maintenance::lock`), so that two never drop the same day.
#[instrument(skip_all)]
pub async fn purge(
    pool: &PgPool,
    policy: &RetentionPolicy,
    stop: &CancellationToken,
) -> sqlx::Result<Purged> {
    let (older_than, failed_older_than) = policy.bind_ages();
    let (days, processed_or_skipped) = drop_days(pool, partitions::ARCHIVE, older_than, stop).await?;
    let failed = match failed_older_than {
        Some(age) if !stop.is_cancelled() => purge_kind(pool, FAILED.as_str(), age, stop).await?,
        _ => 0,
    };
    Ok(Purged { processed_or_skipped, days, failed })
}

/// Forwarding's rows purged (or, in a dry run, purgeable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PurgedForwarding {
    /// Attempts, by their age.
    pub attempts: u64,
    /// Sent jobs, by when they were sent.
    pub sent_jobs: u64,
    /// Dead jobs, by when they were created, kept as long as FAILED rows.
    pub dead_jobs: u64,
}

/// Deletes forwarding's rows the policy says are old enough, as [`purge`]
/// does the archive's: attempts by the day, jobs in batches.
#[instrument(skip_all)]
pub async fn purge_forwarding(
    pool: &PgPool,
    policy: &RetentionPolicy,
    stop: &CancellationToken,
) -> sqlx::Result<PurgedForwarding> {
    let (older_than, failed_older_than) = policy.bind_ages();
    let (_, attempts) = drop_days(pool, partitions::ATTEMPTS, older_than, stop).await?;
    let mut purged = PurgedForwarding { attempts, ..PurgedForwarding::default() };
    if !stop.is_cancelled() {
        purged.sent_jobs = purge_kind(pool, jobs::SENT.batch.as_str(), older_than, stop).await?;
    }
    if let Some(age) = failed_older_than.filter(|_| !stop.is_cancelled()) {
        purged.dead_jobs = purge_kind(pool, jobs::DEAD.batch.as_str(), age, stop).await?;
    }
    Ok(purged)
}

/// Counts the forwarding rows [`purge_forwarding`] would delete now.
#[instrument(skip_all)]
pub async fn count_purgeable_forwarding(
    pool: &PgPool,
    policy: &RetentionPolicy,
) -> sqlx::Result<PurgedForwarding> {
    let (older_than, failed_older_than) = policy.bind_ages();
    let count = |kind: &'static Purgeable, age: Option<f64>| async move {
        // A NULL age (dead jobs kept forever) makes the condition NULL: none.
        sqlx::query_scalar::<_, i64>(kind.count.as_str()).bind(age).fetch_one(pool).await.map(|n| n as u64)
    };
    let sent_jobs = count(&jobs::SENT, Some(older_than)).await?;
    let dead_jobs = count(&jobs::DEAD, failed_older_than).await?;
    let (_, attempts) = count_days(pool, partitions::ATTEMPTS, older_than).await?;
    Ok(PurgedForwarding { attempts, sent_jobs, dead_jobs })
}

/// Drops the day partitions of `table` whose day ended more than `age`
/// seconds ago, oldest first, until none is left or `stop` is cancelled;
/// returns the days dropped and the rows they held (counted just before
/// each drop, so that what a purge reports is what it removed).
async fn drop_days(
    pool: &PgPool,
    table: DayPartitioned,
    age: f64,
    stop: &CancellationToken,
) -> sqlx::Result<(u64, u64)> {
    let (mut days, mut rows) = (0, 0);
    for partition in table.ended_before(pool, age).await? {
        if stop.is_cancelled() {
            break;
        }
        let held = table.rows(pool, &partition).await?;
        table.drop_partition(pool, &partition).await?;
        tracing::debug!(partition = %partition.name, rows = held, "dropped a day");
        days += 1;
        rows += held as u64;
    }
    Ok((days, rows))
}

/// The days [`drop_days`] would drop now, and their rows.
async fn count_days(pool: &PgPool, table: DayPartitioned, age: f64) -> sqlx::Result<(u64, u64)> {
    let (mut days, mut rows) = (0, 0);
    for partition in table.ended_before(pool, age).await? {
        days += 1;
        rows += table.rows(pool, &partition).await? as u64;
    }
    Ok((days, rows))
}

/// Runs `batch` (a [`delete_oldest`]) until it deletes less than a batch or
/// `stop` is cancelled; returns the rows deleted.
async fn purge_kind(
    pool: &PgPool,
    batch: &'static str,
    age: f64,
    stop: &CancellationToken,
) -> sqlx::Result<u64> {
    let mut purged = 0;
    loop {
        let deleted = sqlx::query(batch).bind(age).bind(BATCH_SIZE).execute(pool).await?.rows_affected();
        purged += deleted;
        tracing::debug!(rows = deleted, "purged a batch");
        if deleted < BATCH_SIZE as u64 || stop.is_cancelled() {
            return Ok(purged);
        }
    }
}

/// Counts the rows [`purge`] would delete now, deleting nothing.
#[instrument(skip_all)]
pub async fn count_purgeable(pool: &PgPool, policy: &RetentionPolicy) -> sqlx::Result<Purged> {
    let (older_than, failed_older_than) = policy.bind_ages();
    let (days, processed_or_skipped) = count_days(pool, partitions::ARCHIVE, older_than).await?;
    // A NULL age (FAILED rows kept forever) makes the condition NULL: none.
    let failed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM webhook_events
         WHERE processing_status = 'FAILED' AND created_at < now() - make_interval(secs => $1::float8)",
    )
    .bind(failed_older_than)
    .fetch_one(pool)
    .await?;
    Ok(Purged { processed_or_skipped, days, failed: failed as u64 })
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
