//! One round of a queue at a chosen time: claim, send everything claimed,
//! record. What `run_once` and the tests drive a queue with, choosing `now`
//! instead of waiting for the clock; the engine's runner (`runner.rs`) keeps
//! sends in flight continuously instead.

use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use sqlx::PgPool;

use super::connection::KeptConnection;
use super::{Queue, Verdict, lease_from, send};

/// What one or more rounds did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows sent.
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

/// One round at time `now`: claims up to the queue's capacity of due rows,
/// sends them concurrently, and records their outcomes on the connection it
/// claimed with.
pub async fn deliver_due<Q: Queue>(pool: &PgPool, queue: &Q, now: DateTime<Utc>) -> sqlx::Result<Round> {
    let mut conn = KeptConnection::new(pool.clone());
    let (lease_until, lease_ends) = lease_from(queue, now);
    let claimed = match queue.claim(conn.get().await?, now, lease_until, queue.capacity()).await {
        Ok(claimed) => claimed,
        Err(error) => {
            conn.failed(&error);
            return Err(error);
        }
    };
    if claimed.is_empty() {
        return Ok(Round::default());
    }
    let done = join_all(claimed.into_iter().map(|job| send(queue, job, now, lease_ends))).await;
    let mut round = Round { claimed: done.len(), ..Round::default() };
    for done in &done {
        match done.verdict {
            Verdict::Sent => round.sent += 1,
            Verdict::Retry(_) => round.retrying += 1,
            Verdict::Dead => round.dead += 1,
        }
    }
    if let Err(error) = conn.record(queue, &done, lease_ends).await {
        super::unrecorded(queue, done.len(), &error);
    }
    Ok(round)
}

/// Rounds at time `now` until no due row is left.
pub async fn run_once<Q: Queue>(pool: &PgPool, queue: &Q, now: DateTime<Utc>) -> sqlx::Result<Round> {
    let mut total = Round::default();
    loop {
        let round = deliver_due(pool, queue, now).await?;
        total += round;
        if round.claimed < queue.capacity() {
            return Ok(total);
        }
    }
}
