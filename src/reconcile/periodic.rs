//! Reconciliation inside `serve`: each provider with an API key read again
//! every `RECONCILE_INTERVAL_SECS`, at startup first (the moment after an
//! outage is when events are missing). Every replica runs the loop; the
//! provider's lock lets one of them read at a time, and the others' turns
//! are counted `busy` and skipped.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Log, Options, ReconcileError};
use crate::inbox::RoutingTable;
use crate::monitoring::Metrics;

/// Starts reconciling `log` every `interval` until `stop`; a run in
/// progress at `stop` is dropped (its transaction rolls back, its
/// connection and lock go; the next run starts from the stored mark).
pub fn spawn(
    pool: PgPool,
    routing: Arc<RoutingTable>,
    log: Log,
    interval: Duration,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let provider = log.provider();
        metrics.reconciliation_scheduled(provider, interval);
        let options = Options::default();
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let run = log.reconcile(&pool, &routing, &options);
            let result = tokio::select! {
                () = stop.cancelled() => return,
                result = run => result,
            };
            let outcome = match &result {
                Ok(summary) => {
                    summary.log("reconciled");
                    "ok"
                }
                Err(ReconcileError::AlreadyRunning(_)) => {
                    tracing::debug!(provider, "another replica is reconciling: skipped");
                    "busy"
                }
                Err(error) => {
                    tracing::warn!(provider, %error, "reconciliation failed");
                    "failed"
                }
            };
            metrics.reconciliation_run(provider, outcome);
        }
    })
}
