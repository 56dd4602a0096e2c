//! Throughput, latency percentiles (HDR histogram) and answer counts.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::client::Sample;

/// The numbers of one run.
pub struct Report {
    requests: usize,
    seconds: f64,
    latency: Histogram<u64>,
    statuses: BTreeMap<u16, usize>,
    idempotent: usize,
}

impl Report {
    /// Summarises `samples` taken over `elapsed`.
    pub fn new(samples: &[Sample], elapsed: Duration) -> Self {
        let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
        let mut statuses = BTreeMap::new();
        for sample in samples {
            latency.saturating_record(sample.latency.as_micros() as u64);
            *statuses.entry(sample.status).or_default() += 1;
        }
        Report {
            requests: samples.len(),
            seconds: elapsed.as_secs_f64(),
            latency,
            statuses,
            idempotent: samples.iter().filter(|s| s.idempotent).count(),
        }
    }

    /// Requests per second over the whole run.
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    /// Latency at `quantile`, in milliseconds.
    pub fn ms(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }

    /// Slowest request, in milliseconds.
    pub fn max_ms(&self) -> f64 {
        self.latency.max() as f64 / 1000.0
    }

    /// Requests answered with `status`.
    pub fn with_status(&self, status: u16) -> usize {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    /// Requests in all.
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// Answers that said `"idempotent": true`.
    pub fn idempotent(&self) -> usize {
        self.idempotent
    }

    /// One JSON object (latencies in milliseconds).
    pub fn json(&self) -> String {
        let statuses: serde_json::Map<String, serde_json::Value> =
            self.statuses.iter().map(|(status, count)| (status.to_string(), (*count).into())).collect();
        serde_json::json!({
            "requests": self.requests,
            "seconds": self.seconds,
            "rps": self.rps(),
            "p50_ms": self.ms(0.50),
            "p90_ms": self.ms(0.90),
            "p99_ms": self.ms(0.99),
            "max_ms": self.max_ms(),
            "mean_ms": self.latency.mean() / 1000.0,
            "statuses": statuses,
            "idempotent": self.idempotent,
        })
        .to_string()
    }

    /// A few readable lines.
    pub fn text(&self) -> String {
        format!(
            "{} requests in {:.2} s: {:.0} requests/s\nlatency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}\nstatuses: {:?}  idempotent answers: {}",
            self.requests,
            self.seconds,
            self.rps(),
            self.ms(0.50),
            self.ms(0.90),
            self.ms(0.99),
            self.max_ms(),
            self.statuses,
            self.idempotent
        )
    }
}
