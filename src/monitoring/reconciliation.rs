//! Reconciliation's metrics: this process's runs by outcome, counted as
//! they end, and how often it reconciles; and, read from
//! `reconciliation_state` at scrape time (so every replica's runs and the
//! CLI's count), the events recovered and the last run's time and result.

use std::time::Duration;

use chrono::{DateTime, Utc};
use metrics::{Key, Label, Recorder};
use metrics_exporter_prometheus::PrometheusRecorder;
use sqlx::PgPool;

pub(super) const RUNS: &str = "webhook_reconcile_runs_total";
pub(super) const RECOVERED: &str = "webhook_reconcile_recovered_events_total";
pub(super) const LAST_RUN: &str = "webhook_reconcile_last_run_timestamp_seconds";
pub(super) const LAST_SUCCESS: &str = "webhook_reconcile_last_run_success";
pub(super) const INTERVAL: &str = "webhook_reconcile_interval_seconds";

use super::registry::METADATA;

fn key(metric: &'static str, provider: &str, outcome: Option<&'static str>) -> Key {
    let mut labels = vec![Label::new("provider", provider.to_string())];
    labels.extend(outcome.map(|outcome| Label::from_static_parts("outcome", outcome)));
    Key::from_parts(metric, labels)
}

/// Counts one of this process's runs of `provider`: `ok`, `failed`, or
/// `busy` (another process held the provider).
pub(super) fn count_run(recorder: &PrometheusRecorder, provider: &str, outcome: &'static str) {
    recorder.register_counter(&key(RUNS, provider, Some(outcome)), &METADATA).increment(1);
}

/// Notes that this process reconciles `provider` every `interval`.
pub(super) fn schedule(recorder: &PrometheusRecorder, provider: &str, interval: Duration) {
    recorder.register_gauge(&key(INTERVAL, provider, None), &METADATA).set(interval.as_secs_f64());
}

/// A provider's row, as the gauges read it.
#[derive(sqlx::FromRow)]
pub(super) struct Row {
    provider: String,
    last_finished_at: Option<DateTime<Utc>>,
    last_result: Option<String>,
    recovered_total: i64,
}

/// Every provider reconciled.
pub(super) async fn query(pool: &PgPool) -> sqlx::Result<Vec<Row>> {
    sqlx::query_as(
        "SELECT provider, last_finished_at, last_result, recovered_total FROM reconciliation_state",
    )
    .fetch_all(pool)
    .await
}

/// Sets the gauges of every row (a run not finished yet leaves its last ones).
pub(super) fn set_all(recorder: &PrometheusRecorder, rows: &[Row]) {
    for row in rows {
        let provider = row.provider.as_str();
        recorder
            .register_counter(&key(RECOVERED, provider, None), &METADATA)
            .absolute(row.recovered_total as u64);
        if let (Some(at), Some(result)) = (row.last_finished_at, row.last_result.as_deref()) {
            recorder.register_gauge(&key(LAST_RUN, provider, None), &METADATA).set(at.timestamp() as f64);
            let success = if result == "ok" { 1.0 } else { 0.0 };
            recorder.register_gauge(&key(LAST_SUCCESS, provider, None), &METADATA).set(success);
        }
    }
}
