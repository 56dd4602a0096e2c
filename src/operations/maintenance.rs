//! The archive's upkeep in the background. `serve` runs a round at startup
//! and every hour until shutdown: it moves an archive that is not yet
//! partitioned into the partitioned tables (once, after the upgrade that
//! partitioned it), makes the day partitions ahead, and purges by the
//! retention policy, as `webhook-inbox purge` does.

use std::time::Duration;

use sqlx::PgPool;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::purge::{RetentionPolicy, purge, purge_forwarding};
use crate::db::{SessionLock, conversion, partitions};

/// The lock a round of upkeep, `purge` and `migrate`'s conversion hold, so
/// that one process at a time drops partitions and moves rows.
pub async fn lock(pool: &PgPool) -> sqlx::Result<Option<SessionLock>> {
    SessionLock::try_take(pool, "webhook-inbox maintenance", "archive").await
}

/// Runs a round now and then every `every`, until `stop` is cancelled; a
/// batch or a day in progress finishes first. `retention`: `None` keeps
/// every row.
///
/// Every replica runs this; the one that holds the lock does the round, the
/// others skip it. A failed step (the database away, say) is logged and
/// tried again at the next round.
pub async fn run(pool: PgPool, retention: Option<RetentionPolicy>, every: Duration, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        match lock(&pool).await {
            Ok(Some(lock)) => {
                round(&pool, retention.as_ref(), &stop).await;
                lock.release().await;
            }
            Ok(None) => tracing::debug!("another process is doing the archive's upkeep"),
            Err(error) => {
                tracing::warn!(%error, "archive upkeep: the database is unavailable; retrying at the next round")
            }
        }
        if stop.is_cancelled() {
            return;
        }
    }
}

/// One round, under the lock.
async fn round(pool: &PgPool, retention: Option<&RetentionPolicy>, stop: &CancellationToken) {
    if let Err(error) = partitions::create_ahead(pool).await {
        tracing::warn!(
            %error,
            "could not make the day partitions ahead: deliveries fail once the days made run out \
             (webhook_archive_partition_days_ahead)"
        );
    }
    match conversion::pending(pool).await {
        Ok(false) => {}
        Ok(true) => {
            if let Err(error) = conversion::convert(pool, stop).await {
                tracing::warn!(%error, "moving the unpartitioned archive failed; going on at the next round");
            }
        }
        Err(error) => tracing::warn!(%error, "archive upkeep: could not tell whether rows are left to move"),
    }
    let Some(policy) = retention.filter(|_| !stop.is_cancelled()) else {
        return;
    };
    match purge(pool, policy, stop).await {
        Ok(purged) if purged.total() > 0 => tracing::info!(
            processed_or_skipped = purged.processed_or_skipped,
            days = purged.days,
            failed = purged.failed,
            "retention purged archive rows"
        ),
        Ok(_) => tracing::debug!("retention: nothing to purge"),
        Err(error) => tracing::warn!(%error, "retention purge failed; retrying at the next run"),
    }
    if stop.is_cancelled() {
        return;
    }
    match purge_forwarding(pool, policy, stop).await {
        Ok(purged) if purged.attempts + purged.sent_jobs + purged.dead_jobs > 0 => tracing::info!(
            attempts = purged.attempts,
            sent_jobs = purged.sent_jobs,
            dead_jobs = purged.dead_jobs,
            "retention purged forwarding rows"
        ),
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(%error, "retention purge of forwarding failed; retrying at the next run")
        }
    }
}
