//! Each declared destination is a queue of the engine (`crate::queue`): its
//! claim skips what must not be sent now (paused, disabled by a 410, circuit
//! open, over the rate limit, an entity whose earlier event is not sent
//! yet), its send is one signed POST, and its record also writes the
//! attempt and moves the circuit breaker. The statements are the store's
//! (`store::sending`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::declaration::Destination;
use super::jobs::ClaimedJob;
use super::sender::{self, Attempt, ForwardedEvent};
use super::store::sending;
use crate::queue::{Done, Queue, Schedule, Verdict};
use crate::telemetry;

/// A lease outlasts the request's timeout by this much: room for the
/// record after it, beyond the engine's own margin.
const LEASE_SLACK: Duration = Duration::from_secs(15);

/// Rows a destination without a rate limit may have claimed and waiting, per
/// send slot.
const CLAIMED_AHEAD: usize = 4;

/// What a destination's queue counts as it sends: the service's metrics.
pub trait SendCounts: Send + Sync {
    /// Counts an attempt whose outcome is `kind` (`sender::Attempt::kind`),
    /// which took `elapsed`.
    fn attempted(&self, kind: &str, elapsed: Duration);

    /// Counts a panic of the queue's runner, which was started again.
    fn restarted(&self);
}

/// One destination's queue.
pub struct DestinationQueue {
    destination: Arc<Destination>,
    client: reqwest::Client,
    label: String,
    metrics: Option<Arc<dyn SendCounts>>,
}

impl DestinationQueue {
    /// Sends to `destination` with `client`, counting in `metrics`.
    pub fn new(
        destination: Arc<Destination>,
        client: reqwest::Client,
        metrics: Option<Arc<dyn SendCounts>>,
    ) -> DestinationQueue {
        let label = format!("destination {}", destination.name);
        DestinationQueue { destination, client, label, metrics }
    }
}

impl Queue for DestinationQueue {
    type Row = ClaimedJob;
    type Attempt = Attempt;

    fn name(&self) -> &str {
        &self.label
    }

    fn capacity(&self) -> usize {
        self.destination.concurrency
    }

    /// Rows waiting to start keep the sends going between steps; none under
    /// a rate limit, whose tokens a claim spends.
    fn ahead(&self) -> usize {
        match self.destination.rate_limit {
            None => CLAIMED_AHEAD * self.destination.concurrency,
            Some(_) => 0,
        }
    }

    fn lease(&self) -> Duration {
        self.destination.timeout + LEASE_SLACK
    }

    fn schedule(&self) -> &Schedule {
        &self.destination.schedule
    }

    async fn claim(
        &self,
        conn: &mut PgConnection,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: usize,
    ) -> sqlx::Result<Vec<ClaimedJob>> {
        sending::claim(conn, &self.destination, now, lease_until, limit).await
    }

    async fn send(&self, job: &ClaimedJob) -> Attempt {
        let outgoing = ForwardedEvent {
            provider: &job.provider,
            event_type: &job.event_type,
            event_id: &job.event_id,
            occurred_at: job.occurred_at,
            body: job.body.clone(),
            attempt: u32::try_from(job.attempts).unwrap_or(u32::MAX),
        };
        sender::send(&self.client, &self.destination, &outgoing, Utc::now()).await
    }

    async fn record(&self, conn: &mut PgConnection, done: &[Done<ClaimedJob, Attempt>]) -> sqlx::Result<()> {
        sending::record(conn, &self.destination, done).await
    }

    async fn release(&self, conn: &mut PgConnection, jobs: &[ClaimedJob]) -> sqlx::Result<()> {
        sending::release(conn, jobs).await
    }

    /// An attempt's span, in the trace of the delivery its job was made
    /// from: the request it sends carries the span's context.
    fn span(&self, job: &ClaimedJob) -> tracing::Span {
        let span = tracing::info_span!(
            "forward",
            job_id = job.id,
            destination = %self.destination.name,
            provider = %job.provider,
            event_id = %job.event_id,
            attempt = job.attempts,
        );
        telemetry::context::continue_stored(&span, job.traceparent.as_deref());
        span
    }

    fn restarted(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.restarted();
        }
    }

    fn report(&self, done: &Done<ClaimedJob, Attempt>) {
        if let Some(metrics) = &self.metrics {
            metrics.attempted(done.attempt.kind(), done.duration);
        }
        let status = done.attempt.status;
        let error = done.attempt.error.as_deref().unwrap_or_default();
        match done.verdict {
            Verdict::Sent => tracing::info!(?status, "event forwarded"),
            Verdict::Retry(retry_at) => {
                tracing::warn!(?status, error, %retry_at, "forward failed, will retry")
            }
            Verdict::Dead => {
                tracing::error!(?status, error, "forward failed and no attempt is left: the job is dead")
            }
        }
        if done.attempt.gone() {
            tracing::error!(
                "the destination answered 410 Gone: it is disabled and its jobs wait; \
                 `webhook-inbox destinations resume` sends them again"
            );
        }
    }
}
