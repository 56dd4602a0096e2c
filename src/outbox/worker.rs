//! The worker: claims due outbox rows, sends them, records the outcome,
//! retries with exponential backoff, and gives up after a bounded number of
//! attempts.
//!
//! Delivery is at least once, not exactly once: a worker that dies (or is
//! stopped, or cannot reach the database until its lease is nearly over)
//! after the SMTP server accepted an email but before the row is marked
//! sent leaves a claim whose lease expires, and the email is sent again,
//! with the same Message-ID, so the copy is recognisable downstream.
//! Everything else (several workers, several replicas, retries, a busy
//! database) sends each row once.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::EmailKind;
use super::mailer::{Mailer, Outgoing};
use super::marks::Marks;
use super::queue::{self, Claimed, Outcome};

/// Rows claimed (and sent concurrently) per round.
const BATCH_SIZE: i64 = 10;

/// When to try a failed email again, and when to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first one included; then the row is dead.
    pub max_attempts: u32,
    /// Delay after the first failure; it doubles after each further one.
    pub base: Duration,
    /// The longest delay.
    pub cap: Duration,
}

impl Retry {
    /// The delay before the next attempt once `attempts` have failed, or
    /// `None` when none is left.
    pub fn delay_after(&self, attempts: u32) -> Option<Duration> {
        if attempts >= self.max_attempts {
            return None;
        }
        let factor = 2u32.checked_pow(attempts.saturating_sub(1)).unwrap_or(u32::MAX);
        Some(self.base.saturating_mul(factor).min(self.cap))
    }
}

/// What one or more rounds did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Rows claimed.
    pub claimed: usize,
    /// Emails the SMTP server accepted.
    pub sent: usize,
    /// Failed sends that will be tried again.
    pub retrying: usize,
    /// Failed sends with no attempt left: the row is dead.
    pub dead: usize,
}

impl std::ops::AddAssign for Round {
    fn add_assign(&mut self, other: Round) {
        self.claimed += other.claimed;
        self.sent += other.sent;
        self.retrying += other.retrying;
        self.dead += other.dead;
    }
}

/// Delivers the outbox of one database over one SMTP server.
#[derive(Debug, Clone)]
pub struct Worker {
    pool: PgPool,
    mailer: Arc<Mailer>,
    retry: Retry,
    poll_interval: Duration,
}

impl Worker {
    /// A worker that looks for due rows every `poll_interval` when idle.
    pub fn new(pool: PgPool, mailer: Mailer, retry: Retry, poll_interval: Duration) -> Worker {
        Worker { pool, mailer: Arc::new(mailer), retry, poll_interval }
    }

    /// How long a claim is leased: long enough for a whole round of sends,
    /// each bounded by the SMTP timeout, and the records after them.
    fn lease(&self) -> Duration {
        self.mailer.timeout() * 2 + Duration::from_secs(10)
    }

    /// One round at time `now`: claims up to a batch of due rows, sends
    /// them concurrently, and records each outcome. Tests drive the worker
    /// with this, choosing `now` instead of waiting for the clock.
    pub async fn deliver_due(&self, now: DateTime<Utc>) -> sqlx::Result<Round> {
        let lease = self.lease();
        // The round's connection, for the claim and then every mark (see marks.rs).
        let mut conn = self.pool.acquire().await?;
        let lease_ends = Instant::now() + lease;
        let lease_until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
        let rows = queue::claim(&mut conn, now, lease_until, BATCH_SIZE).await?;
        if rows.is_empty() {
            return Ok(Round::default());
        }
        let mut marks = Marks::new(self.pool.clone(), conn, lease_ends);
        let sends = join_all(rows.iter().map(|row| self.send(row))).await;
        let mut round = Round { claimed: rows.len(), ..Round::default() };
        for (row, sent) in rows.iter().zip(sends) {
            let outcome = match &sent {
                Ok(()) => {
                    round.sent += 1;
                    tracing::info!(outbox_id = %row.id, kind = row.kind, attempts = row.attempts, "email sent");
                    Outcome::Sent
                }
                Err(error) => {
                    let delay = self.retry.delay_after(u32::try_from(row.attempts).unwrap_or(u32::MAX));
                    let retry_at = delay.and_then(|d| chrono::Duration::from_std(d).ok()).map(|d| now + d);
                    if let Some(retry_at) = retry_at {
                        round.retrying += 1;
                        // The error may quote the address: it goes to the row, not the log.
                        tracing::warn!(outbox_id = %row.id, kind = row.kind, attempts = row.attempts, %retry_at,
                            "email not sent, will retry; the error is in outbox.last_error");
                    } else {
                        round.dead += 1;
                        tracing::error!(outbox_id = %row.id, kind = row.kind, attempts = row.attempts,
                            "email not sent and no attempt left: the outbox row is dead");
                    }
                    Outcome::Failed { error, retry_at }
                }
            };
            // The other rows still get recorded; this one is tried again
            // when its lease expires.
            if let Err(error) = marks.record(row, &outcome).await {
                match outcome {
                    Outcome::Sent => tracing::error!(outbox_id = %row.id, %error,
                        "could not record a sent email before its lease ends: it will be sent again (same Message-ID)"),
                    Outcome::Failed { .. } => tracing::warn!(outbox_id = %row.id, %error,
                        "could not record a failed send before its lease ends: it is tried again once the lease expires"),
                }
            }
        }
        Ok(round)
    }

    /// Rounds at time `now` until no due row is left.
    pub async fn run_once(&self, now: DateTime<Utc>) -> sqlx::Result<Round> {
        let mut total = Round::default();
        loop {
            let round = self.deliver_due(now).await?;
            total += round;
            if round.claimed < BATCH_SIZE as usize {
                return Ok(total);
            }
        }
    }

    async fn send(&self, row: &Claimed) -> Result<(), String> {
        let kind =
            EmailKind::from_db(&row.kind).ok_or_else(|| format!("unknown email kind {:?}", row.kind))?;
        let to = row.email.as_deref().filter(|email| !email.is_empty()).ok_or_else(|| {
            format!(
                "no address for user {:?}: unknown, deleted, or without a primary email",
                row.user_id.as_deref().unwrap_or("")
            )
        })?;
        let name = row.first_name.as_deref().filter(|name| !name.is_empty()).unwrap_or(to);
        let values = [
            ("name", name),
            ("first_name", row.first_name.as_deref().unwrap_or("")),
            ("last_name", row.last_name.as_deref().unwrap_or("")),
            ("email", to),
            ("subscription_id", row.subscription_id.as_deref().unwrap_or("")),
        ];
        self.mailer.send(&Outgoing { id: row.id, kind, to, values: &values }).await
    }

    /// Runs the worker in a task: rounds back to back while rows are due,
    /// then one look every poll interval, until [`RunningWorker::stop`].
    pub fn spawn(self) -> RunningWorker {
        let stop = CancellationToken::new();
        let task = tokio::spawn(self.run(stop.clone()));
        RunningWorker { stop, task }
    }

    async fn run(self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            let busy = match self.deliver_due(Utc::now()).await {
                Ok(round) => round.claimed == BATCH_SIZE as usize,
                Err(error) => {
                    tracing::warn!(%error, "outbox round failed; trying again after the poll interval");
                    false
                }
            };
            if !busy {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = tokio::time::sleep(self.poll_interval) => {}
                }
            }
        }
        tracing::info!("outbox worker stopped");
    }
}

/// A spawned worker.
#[derive(Debug)]
pub struct RunningWorker {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl RunningWorker {
    /// Starts no new round from now on, and waits for the round in progress
    /// until `deadline`; past it the round is abandoned. Returns whether it
    /// finished.
    ///
    /// An abandoned round loses nothing: its claims stay leased, and the
    /// next worker (this process's successor, another replica) sends their
    /// emails once the lease expires. One the SMTP server had accepted
    /// before the round was cut is sent again then, with the same Message-ID.
    pub async fn stop(self, deadline: Instant) -> bool {
        self.stop.cancel();
        let mut task = self.task;
        match tokio::time::timeout_at(deadline, &mut task).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                tracing::error!(%error, "the outbox worker panicked");
                true
            }
            Err(_) => {
                task.abort();
                // Returns once the round is dropped, and its connection with it.
                let _ = task.await;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_the_cap_and_stops_at_the_last_attempt() {
        let retry = Retry { max_attempts: 6, base: Duration::from_secs(30), cap: Duration::from_secs(200) };
        let delays: Vec<_> =
            (1..=6).map(|attempts| retry.delay_after(attempts).map(|d| d.as_secs())).collect();
        assert_eq!(delays, [Some(30), Some(60), Some(120), Some(200), Some(200), None]);

        let huge =
            Retry { max_attempts: u32::MAX, base: Duration::from_secs(1), cap: Duration::from_secs(3600) };
        assert_eq!(huge.delay_after(1000), Some(Duration::from_secs(3600)));
        let once = Retry { max_attempts: 1, ..huge };
        assert_eq!(once.delay_after(1), None);
    }
}
