//! Per-provider delivery metrics, registered once per provider so that a
//! delivery only bumps atomics: no label is built on the request path.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use metrics::{Counter, Gauge, Histogram, Recorder};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::registry::{METADATA, Named, labelled};
use crate::providers::SignatureError;

pub(super) const DELIVERIES: &str = "webhook_deliveries_total";
pub(super) const REJECTIONS: &str = "webhook_rejections_total";
pub(super) const DURATION: &str = "webhook_delivery_duration_seconds";
pub(super) const LAG: &str = "webhook_provider_lag_seconds";
pub(super) const SILENCE: &str = "webhook_seconds_since_last_verified_delivery";

/// Every `outcome` label value: what the request span records as `outcome`.
pub const OUTCOMES: [&str; 8] =
    ["processed", "duplicate", "failed", "rejected", "invalid", "busy", "unavailable", "error"];

/// Every `reason` label value of a rejection, one per [`SignatureError`].
const REASONS: [&str; 5] = [
    "missing_header",
    "malformed_header",
    "timestamp_too_old",
    "timestamp_in_future",
    "no_matching_signature",
];

fn reason_index(error: &SignatureError) -> usize {
    match error {
        SignatureError::MissingHeader(_) => 0,
        SignatureError::MalformedHeader(_) => 1,
        SignatureError::TimestampTooOld => 2,
        SignatureError::TimestampInFuture => 3,
        SignatureError::NoMatchingSignature => 4,
    }
}

/// One provider's handles.
pub struct ProviderMetrics {
    name: String,
    outcomes: Vec<Counter>,
    rejections: Vec<Counter>,
    /// Rejections since startup, for the console (a counter handle cannot be read).
    rejected: AtomicU64,
    duration: Histogram,
    lag: Histogram,
    /// Unix milliseconds of the last verified delivery (at first, of startup).
    last_verified_ms: AtomicI64,
    silence: Gauge,
}

impl Named for ProviderMetrics {
    fn name(&self) -> &str {
        &self.name
    }
}

impl ProviderMetrics {
    pub(super) fn register(recorder: &PrometheusRecorder, name: &str) -> Self {
        let key = |metric, extra| labelled("provider", name, metric, extra);
        ProviderMetrics {
            name: name.to_string(),
            outcomes: OUTCOMES
                .iter()
                .map(|o| recorder.register_counter(&key(DELIVERIES, Some(("outcome", o))), &METADATA))
                .collect(),
            rejections: REASONS
                .iter()
                .map(|r| recorder.register_counter(&key(REJECTIONS, Some(("reason", r))), &METADATA))
                .collect(),
            rejected: AtomicU64::new(0),
            duration: recorder.register_histogram(&key(DURATION, None), &METADATA),
            lag: recorder.register_histogram(&key(LAG, None), &METADATA),
            last_verified_ms: AtomicI64::new(Utc::now().timestamp_millis()),
            silence: recorder.register_gauge(&key(SILENCE, None), &METADATA),
        }
    }

    /// Counts a delivery answered with `outcome` (one of [`OUTCOMES`]) after `elapsed`.
    pub fn answered(&self, outcome: &str, elapsed: Duration) {
        let index = OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(OUTCOMES.len() - 1);
        self.outcomes[index].increment(1);
        self.duration.record(elapsed.as_secs_f64());
    }

    /// Counts a signature rejection by its reason.
    pub fn rejected(&self, error: &SignatureError) {
        self.rejections[reason_index(error)].increment(1);
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Deliveries this process has rejected (401) since it started: they
    /// are not archived, so only the process that answered knows them.
    pub fn rejected_since_start(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Notes that a delivery passed verification now.
    pub fn verified(&self) {
        self.last_verified_ms.store(Utc::now().timestamp_millis(), Ordering::Relaxed);
    }

    /// Records the lag from the event's `occurred_at` to its processing, now.
    pub fn processed(&self, occurred_at: Option<DateTime<Utc>>) {
        if let Some(occurred_at) = occurred_at {
            let lag = (Utc::now() - occurred_at).num_milliseconds().max(0);
            self.lag.record(lag as f64 / 1000.0);
        }
    }

    /// Brings the "seconds since the last verified delivery" gauge up to now.
    pub(super) fn refresh_silence(&self, now: DateTime<Utc>) {
        let last = self.last_verified_ms.load(Ordering::Relaxed);
        self.silence.set((now.timestamp_millis() - last).max(0) as f64 / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    #[test]
    fn the_silence_gauge_counts_from_the_last_verified_delivery() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let paddle = ProviderMetrics::register(&recorder, "paddle");
        let now = Utc::now();
        paddle.last_verified_ms.store(now.timestamp_millis() - 7_200_000, Ordering::Relaxed);
        paddle.refresh_silence(now);
        let line = |text: String| text.lines().find(|l| l.starts_with(SILENCE)).unwrap().to_string();
        assert_eq!(line(recorder.handle().render()), format!("{SILENCE}{{provider=\"paddle\"}} 7200"));

        paddle.verified();
        paddle.refresh_silence(now + chrono::TimeDelta::seconds(3));
        let value: f64 = line(recorder.handle().render()).rsplit_once(' ').unwrap().1.parse().unwrap();
        assert!((2.0..=3.5).contains(&value), "{value}");
    }
}
