//! Retention in the background: `serve` runs the same purge as
//! `webhook-inbox purge`, periodically, until shutdown.

use std::time::Duration;

use sqlx::PgPool;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::purge::{RetentionPolicy, purge, purge_forwarding};

/// Purges by `policy` now and then every `every`, until `stop` is
/// cancelled; a batch in progress finishes first.
///
/// Every replica runs this; the purge's `SKIP LOCKED` batches make
/// simultaneous runs share the work rather than collide. A failed run (the
/// database away, say) is logged and retried at the next tick.
pub async fn run(pool: PgPool, policy: RetentionPolicy, every: Duration, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        match purge(&pool, &policy, &stop).await {
            Ok(purged) if purged.total() > 0 => tracing::info!(
                processed_or_skipped = purged.processed_or_skipped,
                failed = purged.failed,
                "retention purged archive rows"
            ),
            Ok(_) => tracing::debug!("retention: nothing to purge"),
            Err(error) => tracing::warn!(%error, "retention purge failed; retrying at the next run"),
        }
        if stop.is_cancelled() {
            return;
        }
        match purge_forwarding(&pool, &policy, &stop).await {
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
}
