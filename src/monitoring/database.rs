//! Gauges read from the database when `/metrics` is scraped. This is the one
//! place for database-backed gauges: to add one, add a column to the query
//! and a gauge here.

use std::time::{Duration, Instant};

use metrics::{Gauge, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::PrometheusRecorder;
use sqlx::PgPool;

use crate::db::partitions;

pub(super) const FAILED_24H: &str = "webhook_failed_deliveries_24h";
pub(super) const OLDEST_FAILURE: &str = "webhook_oldest_unapplied_failure_age_seconds";
pub(super) const OUTBOX: &str = "webhook_outbox_emails";
pub(super) const QUERY_OK: &str = "webhook_metrics_database_query_ok";
pub(super) const POOL_CONNECTIONS: &str = "webhook_db_pool_connections";
pub(super) const POOL_MAX: &str = "webhook_db_pool_max_connections";
pub(super) const PARTITIONS_AHEAD: &str = "webhook_archive_partition_days_ahead";

/// Longest a scrape waits for the database before rendering without it.
pub(super) const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Scrapes within this long of the last query reuse its values: however
/// many scrapers there are, the query runs at most this often per process.
const QUERY_EVERY: Duration = Duration::from_secs(10);

/// The handles, and when the query last ran.
pub(super) struct DatabaseGauges {
    failed_24h: Gauge,
    oldest_failure: Gauge,
    outbox_pending: Gauge,
    outbox_dead: Gauge,
    query_ok: Gauge,
    pool_idle: Gauge,
    pool_in_use: Gauge,
    pool_max: Gauge,
    partitions_ahead: Gauge,
    last_query: tokio::sync::Mutex<Option<Instant>>,
}

impl DatabaseGauges {
    pub(super) fn register(recorder: &PrometheusRecorder) -> Self {
        const METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));
        let gauge = |key: Key| recorder.register_gauge(&key, &METADATA);
        let labelled = |name: &'static str, state: &'static str| {
            gauge(Key::from_parts(name, vec![Label::from_static_parts("state", state)]))
        };
        DatabaseGauges {
            failed_24h: gauge(Key::from_static_name(FAILED_24H)),
            oldest_failure: gauge(Key::from_static_name(OLDEST_FAILURE)),
            outbox_pending: labelled(OUTBOX, "pending"),
            outbox_dead: labelled(OUTBOX, "dead"),
            query_ok: gauge(Key::from_static_name(QUERY_OK)),
            pool_idle: labelled(POOL_CONNECTIONS, "idle"),
            pool_in_use: labelled(POOL_CONNECTIONS, "in_use"),
            pool_max: gauge(Key::from_static_name(POOL_MAX)),
            partitions_ahead: gauge(Key::from_static_name(PARTITIONS_AHEAD)),
            last_query: tokio::sync::Mutex::new(None),
        }
    }

    /// Brings the gauges up to date: the pool's at once, the queried ones
    /// unless they were queried less than [`QUERY_EVERY`] ago. Returns
    /// whether it queried, so that the other database-backed gauges follow
    /// the same pace.
    pub(super) async fn refresh(&self, pool: &PgPool) -> bool {
        let (size, idle) = (pool.size(), pool.num_idle() as u32);
        self.pool_idle.set(idle);
        self.pool_in_use.set(size.saturating_sub(idle));
        self.pool_max.set(pool.options().get_max_connections());

        // Concurrent scrapes wait for one query rather than each run theirs.
        let mut last_query = self.last_query.lock().await;
        if last_query.is_some_and(|at| at.elapsed() < QUERY_EVERY) {
            return false;
        }
        match tokio::time::timeout(QUERY_TIMEOUT, query(pool)).await {
            Ok(Ok(Row { failed_24h, oldest_failure, outbox_pending, outbox_dead, partitions_ahead })) => {
                self.failed_24h.set(failed_24h as f64);
                self.partitions_ahead.set(partitions_ahead);
                self.oldest_failure.set(oldest_failure);
                self.outbox_pending.set(outbox_pending as f64);
                self.outbox_dead.set(outbox_dead as f64);
                self.query_ok.set(1);
                *last_query = Some(Instant::now());
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "metrics: database gauges not refreshed");
                self.query_ok.set(0);
                false
            }
            Err(_) => {
                tracing::warn!("metrics: database gauges query timed out");
                self.query_ok.set(0);
                false
            }
        }
    }

    /// Notes that a further database-backed gauge could not be read.
    pub(super) fn failed(&self) {
        self.query_ok.set(0);
    }
}

/// What the query reads.
#[derive(sqlx::FromRow)]
struct Row {
    /// FAILED deliveries archived in the last 24 hours.
    failed_24h: i64,
    /// Age in seconds of the oldest FAILED delivery whose event has not
    /// been applied since (0 when there is none): the failures still
    /// waiting for someone.
    oldest_failure: f64,
    /// Emails waiting to be sent (or retried).
    outbox_pending: i64,
    /// Emails given up after their last attempt.
    outbox_dead: i64,
    /// Days after today that every table partitioned by day has partitions for.
    partitions_ahead: i32,
}

/// One round trip. Every part reads a partial index only: the FAILED rows
/// (the oldest-failure walk stops at the first unapplied one, checking each
/// against the dedup table's unique index), the pending and dead emails.
async fn query(pool: &PgPool) -> sqlx::Result<Row> {
    sqlx::query_as(
        "SELECT
             (SELECT count(*) FROM webhook_events
              WHERE processing_status = 'FAILED' AND created_at > now() - interval '1 day') AS failed_24h,
             coalesce((SELECT extract(epoch FROM now() - w.created_at)::float8
                       FROM webhook_events w
                       WHERE w.processing_status = 'FAILED'
                         AND NOT EXISTS (SELECT FROM processed_webhook_events p
                                         WHERE p.provider = w.provider AND p.event_id = w.event_id)
                       ORDER BY w.created_at LIMIT 1), 0) AS oldest_failure,
             (SELECT count(*) FROM outbox WHERE status = 'pending') AS outbox_pending,
             (SELECT count(*) FROM outbox WHERE status = 'dead') AS outbox_dead,
             (SELECT min(day_partitions_ahead(t)) FROM unnest($1::regclass[]) t) AS partitions_ahead",
    )
    .bind(partitions::ALL.map(|table| table.table))
    .fetch_one(pool)
    .await
}
