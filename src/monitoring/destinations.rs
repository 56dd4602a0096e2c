//! Per-destination metrics: attempts by outcome and their latency, counted
//! as they happen; the backlog, dead jobs, each destination's state and
//! since when it is paused or disabled, read from the database at scrape
//! time (with the other database gauges).

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Recorder};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::registry::{METADATA, Named, labelled};
use crate::destinations::SendCounts;
use crate::destinations::store::state::{Overview, STATES};
use crate::queue::Status;

pub(super) const ATTEMPTS: &str = "webhook_destination_attempts_total";
pub(super) const ATTEMPT_DURATION: &str = "webhook_destination_attempt_duration_seconds";
pub(super) const JOBS: &str = "webhook_destination_jobs";
pub(super) const OLDEST_PENDING: &str = "webhook_destination_oldest_pending_age_seconds";
pub(super) const STATE: &str = "webhook_destination_state";
pub(super) const STOPPED: &str = "webhook_destination_stopped_seconds";
pub(super) const RESTARTS: &str = "webhook_destination_runner_restarts_total";

/// Every `outcome` label value of an attempt (`sender::Attempt::kind`).
pub const ATTEMPT_OUTCOMES: [&str; 5] = ["sent", "http_error", "gone", "timeout", "network"];

/// Every `state` label value of [`STOPPED`]: the states that last until an
/// operator resumes the destination, so how long one has lasted is worth
/// an alert (a `for:` duration would restart with every failed scrape).
const STOPPED_STATES: [&str; 2] = ["paused", "disabled"];

/// One destination's handles.
pub struct DestinationMetrics {
    name: String,
    attempts: Vec<Counter>,
    duration: Histogram,
    pending: Gauge,
    dead: Gauge,
    oldest_pending: Gauge,
    states: Vec<Gauge>,
    /// Paused, disabled: in the order of [`STOPPED_STATES`].
    stopped: [Gauge; 2],
    restarts: Counter,
}

impl Named for DestinationMetrics {
    fn name(&self) -> &str {
        &self.name
    }
}

impl DestinationMetrics {
    pub(super) fn register(recorder: &PrometheusRecorder, name: &str) -> Self {
        let key = |metric, extra| labelled("destination", name, metric, extra);
        let gauge = |metric, extra| recorder.register_gauge(&key(metric, extra), &METADATA);
        DestinationMetrics {
            name: name.to_string(),
            attempts: ATTEMPT_OUTCOMES
                .iter()
                .map(|o| recorder.register_counter(&key(ATTEMPTS, Some(("outcome", o))), &METADATA))
                .collect(),
            duration: recorder.register_histogram(&key(ATTEMPT_DURATION, None), &METADATA),
            pending: gauge(JOBS, Some(("status", Status::Pending.as_str()))),
            dead: gauge(JOBS, Some(("status", Status::Dead.as_str()))),
            oldest_pending: gauge(OLDEST_PENDING, None),
            // The gauge of the destination's current state is 1, the others 0.
            states: STATES.iter().map(|s| gauge(STATE, Some(("state", s)))).collect(),
            stopped: STOPPED_STATES.map(|s| gauge(STOPPED, Some(("state", s)))),
            restarts: recorder.register_counter(&key(RESTARTS, None), &METADATA),
        }
    }

    fn set(&self, row: &Overview) {
        self.pending.set(row.pending as f64);
        self.dead.set(row.dead as f64);
        self.oldest_pending.set(row.oldest_pending_secs);
        for (gauge, state) in self.states.iter().zip(STATES) {
            gauge.set(if state == row.state { 1.0 } else { 0.0 });
        }
        let [paused, disabled] = &self.stopped;
        paused.set(row.paused_seconds);
        disabled.set(row.disabled_seconds);
    }
}

/// Sets each destination's gauges from `rows`, registering the handles of
/// a destination seen for the first time with `register`.
pub(super) fn set_all(rows: &[Overview], handles: impl Fn(&str) -> std::sync::Arc<DestinationMetrics>) {
    for row in rows {
        handles(&row.name).set(row);
    }
}

impl SendCounts for DestinationMetrics {
    /// `kind` is one of [`ATTEMPT_OUTCOMES`].
    fn attempted(&self, kind: &str, elapsed: Duration) {
        let index = ATTEMPT_OUTCOMES.iter().position(|o| *o == kind).unwrap_or(ATTEMPT_OUTCOMES.len() - 1);
        self.attempts[index].increment(1);
        self.duration.record(elapsed.as_secs_f64());
    }

    fn restarted(&self) {
        self.restarts.increment(1);
    }
}
