//! Prometheus metrics: what `GET /metrics` shows.
//!
//! Each `AppState` owns its own recorder (nothing global), so that every app
//! in a test process counts only its own deliveries. Handles are registered
//! once per provider; a delivery only bumps atomics.

mod database;
mod deliveries;
mod destinations;
mod reconciliation;
mod registry;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use metrics::{KeyName, Recorder, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use sqlx::PgPool;

use crate::destinations::store::state;
use database::DatabaseGauges;
pub use deliveries::ProviderMetrics;
pub use destinations::{ATTEMPT_OUTCOMES, DestinationMetrics};
use registry::{METADATA, Registry};

/// How often recorded histogram samples are folded into their buckets when
/// nobody scrapes (scrapes do it too), so memory stays bounded.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Batches recorded one delivery at a time after failing together.
const BATCH_FALLBACKS: &str = "webhook_batch_fallbacks_total";

/// Operator tokens refused, by surface and refusal.
const TOKEN_REFUSALS: &str = "webhook_operator_token_refusals_total";

/// Seconds from a request's start to its answer: a healthy delivery is a
/// few milliseconds; seconds mean waiting on a lock or the pool.
const DURATION_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Seconds an attempt to forward an event takes: a receiver that answers at
/// once takes milliseconds; the timeout (15 s by default) ends the others.
const ATTEMPT_BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0];

/// Seconds from the event to its processing: providers deliver within
/// seconds, and retry for up to days.
const LAG_BUCKETS: [f64; 12] =
    [0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0, 259200.0];

/// This process's metrics.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    providers: Registry<ProviderMetrics>,
    destinations: Registry<DestinationMetrics>,
    database: DatabaseGauges,
}

impl Metrics {
    /// Metrics with handles for `providers` registered up front, so each
    /// shows (at zero) before its first delivery, and its silence gauge
    /// counts from startup.
    pub fn new(providers: &[&str]) -> Arc<Metrics> {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(deliveries::DURATION.into()), &DURATION_BUCKETS)
            .and_then(|builder| {
                builder.set_buckets_for_metric(Matcher::Full(deliveries::LAG.into()), &LAG_BUCKETS)
            })
            .and_then(|builder| {
                builder.set_buckets_for_metric(
                    Matcher::Full(destinations::ATTEMPT_DURATION.into()),
                    &ATTEMPT_BUCKETS,
                )
            })
            .expect("non-empty buckets")
            .build_recorder();
        describe(&recorder);
        let registered = Registry::default();
        for name in providers {
            registered.get(name, || ProviderMetrics::register(&recorder, name));
        }
        let metrics = Arc::new(Metrics {
            handle: recorder.handle(),
            providers: registered,
            destinations: Registry::default(),
            database: DatabaseGauges::register(&recorder),
            recorder,
        });
        spawn_upkeep(&metrics);
        metrics
    }

    /// The handles of provider `name`, registered on first use.
    pub fn provider(&self, name: &str) -> Arc<ProviderMetrics> {
        self.providers.get(name, || ProviderMetrics::register(&self.recorder, name))
    }

    /// Notes that this process reconciles `provider` every `interval`, so
    /// that an alert can tell when its last run is overdue.
    pub fn reconciliation_scheduled(&self, provider: &str, interval: Duration) {
        reconciliation::schedule(&self.recorder, provider, interval);
    }

    /// Counts one of this process's reconciliation runs of `provider`:
    /// `ok`, `failed`, or `busy` (another process was reconciling it).
    pub fn reconciliation_run(&self, provider: &str, outcome: &'static str) {
        reconciliation::count_run(&self.recorder, provider, outcome);
    }

    /// The counter of batches of deliveries that failed together and were
    /// recorded one at a time: a regression that keeps batching from
    /// working shows here.
    pub fn batch_fallbacks(&self) -> metrics::Counter {
        self.recorder.register_counter(&metrics::Key::from_static_name(BATCH_FALLBACKS), &METADATA)
    }

    /// Counts an operator token refused on `surface` (`admin`, `console`,
    /// `metrics`) because it was `wrong` or its address was `throttled`.
    pub fn token_refused(&self, surface: &'static str, refusal: &'static str) {
        let labels = [
            metrics::Label::from_static_parts("surface", surface),
            metrics::Label::from_static_parts("refusal", refusal),
        ];
        let key = metrics::Key::from_parts(TOKEN_REFUSALS, labels.to_vec());
        self.recorder.register_counter(&key, &METADATA).increment(1);
    }

    /// The handles of destination `name`, registered on first use.
    pub fn destination(&self, name: &str) -> Arc<DestinationMetrics> {
        self.destinations.get(name, || DestinationMetrics::register(&self.recorder, name))
    }

    /// The Prometheus text exposition, with the gauges brought up to date.
    pub async fn render(&self, pool: &PgPool) -> String {
        let now = Utc::now();
        self.providers.for_each(|provider| provider.refresh_silence(now));
        if self.database.refresh(pool).await {
            match tokio::time::timeout(database::QUERY_TIMEOUT, state::overview(pool)).await {
                Ok(Ok(rows)) => destinations::set_all(&rows, |name| self.destination(name)),
                Ok(Err(error)) => {
                    tracing::warn!(%error, "metrics: destination gauges not refreshed");
                    self.database.failed();
                }
                Err(_) => {
                    tracing::warn!("metrics: destination gauges query timed out");
                    self.database.failed();
                }
            }
            match tokio::time::timeout(database::QUERY_TIMEOUT, reconciliation::query(pool)).await {
                Ok(Ok(rows)) => reconciliation::set_all(&self.recorder, &rows),
                Ok(Err(error)) => {
                    tracing::warn!(%error, "metrics: reconciliation gauges not refreshed");
                    self.database.failed();
                }
                Err(_) => {
                    tracing::warn!("metrics: reconciliation gauges query timed out");
                    self.database.failed();
                }
            }
        }
        self.handle.render()
    }
}

/// Folds histogram samples periodically, for as long as `metrics` lives.
fn spawn_upkeep(metrics: &Arc<Metrics>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let metrics = Arc::downgrade(metrics);
    runtime.spawn(async move {
        let mut ticks = tokio::time::interval(UPKEEP_EVERY);
        loop {
            ticks.tick().await;
            match metrics.upgrade() {
                Some(metrics) => metrics.handle.run_upkeep(),
                None => return,
            }
        }
    });
}

/// The `# HELP` lines. (This recorder treats the three `describe_*` alike:
/// a description is per name, whatever the kind.)
fn describe(recorder: &PrometheusRecorder) {
    use database::*;
    use deliveries::*;
    use destinations::*;
    use reconciliation::*;
    let describe = |name: &'static str, unit: Option<Unit>, help: &'static str| {
        recorder.describe_counter(KeyName::from_const_str(name), unit, help.into())
    };
    describe(DELIVERIES, None, "Deliveries answered, by provider and outcome.");
    describe(REJECTIONS, None, "Deliveries rejected by signature verification (401), by reason.");
    describe(DURATION, Some(Unit::Seconds), "Time from a delivery's request to its answer.");
    describe(LAG, Some(Unit::Seconds), "Time from an event's occurred_at to its processing.");
    describe(
        SILENCE,
        Some(Unit::Seconds),
        "Seconds since this process last verified a delivery of the provider (or started).",
    );
    describe(
        TOKEN_REFUSALS,
        None,
        "Operator tokens refused, by surface (admin, console, metrics) and refusal: wrong (401), or throttled (429: too many wrong ones from the address).",
    );
    describe(
        BATCH_FALLBACKS,
        None,
        "Batches of deliveries without side effects that failed together and were recorded one at a time.",
    );
    describe(FAILED_24H, None, "FAILED deliveries archived in the last 24 hours.");
    describe(
        PARTITIONS_AHEAD,
        None,
        "Days after today (UTC) the archive's and the attempts' day partitions reach (below 0: deliveries fail).",
    );
    describe(
        OLDEST_FAILURE,
        Some(Unit::Seconds),
        "Age of the oldest FAILED delivery whose event has not been applied since (0: none).",
    );
    describe(
        OUTBOX,
        None,
        "Outbox emails by state: pending (waiting to be sent or retried), dead (given up).",
    );
    describe(
        RUNS,
        None,
        "Reconciliation runs of this process, by provider and outcome (ok, failed, busy: another process had it).",
    );
    describe(
        RECOVERED,
        None,
        "Events recovered from the provider's event API by reconciliation, every run counted.",
    );
    describe(
        LAST_RUN,
        Some(Unit::Seconds),
        "When the provider's last reconciliation run ended (unix time), any process's.",
    );
    describe(
        INTERVAL,
        Some(Unit::Seconds),
        "RECONCILE_INTERVAL_SECS, for each provider this process reconciles periodically (absent: it does not).",
    );
    describe(
        LAST_SUCCESS,
        None,
        "1 when the provider's last reconciliation run succeeded, 0 when it failed.",
    );
    describe(QUERY_OK, None, "1 when the last database query for these gauges succeeded.");
    describe(
        RESTARTS,
        None,
        "Panics of a destination's runner in this process, each followed by a restart (any is a bug to report).",
    );
    describe(
        ATTEMPTS,
        None,
        "Attempts to forward an event, by destination and outcome: sent (2xx), http_error, gone (410), timeout, network.",
    );
    describe(
        ATTEMPT_DURATION,
        Some(Unit::Seconds),
        "Time from an attempt's start to its answer (or failure).",
    );
    describe(
        JOBS,
        None,
        "Jobs by destination and status: pending (waiting or being retried), dead (given up).",
    );
    describe(OLDEST_PENDING, Some(Unit::Seconds), "Age of the destination's oldest pending job (0: none).");
    describe(
        STATE,
        None,
        "1 for the destination's current state: running, paused, disabled (it answered 410), circuit_open, circuit_half_open.",
    );
    describe(
        STOPPED,
        Some(Unit::Seconds),
        "Seconds since the destination was paused (state=paused) or disabled by a 410 (state=disabled); 0: it is not.",
    );
    describe(POOL_CONNECTIONS, None, "Open database connections, idle or in use.");
    describe(POOL_MAX, None, "The database pool's maximum size.");
}
