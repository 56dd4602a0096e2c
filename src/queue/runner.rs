//! The engine in the background: for each queue, sends kept in flight up to
//! its capacity, each outcome recorded as soon as it is known, and a claim
//! whenever there is room and something may be due (after a record, when
//! woken, or every poll interval).
//!
//! Why continuous rather than rounds: a send that hangs until its timeout
//! (a receiver that stopped answering) must not hold up the other rows of
//! its queue, nor the other queues, as a round waiting for its slowest send
//! would.
//!
//! Every queue's claims and records go through one kept connection: the
//! engine holds one pooled connection whatever it runs, and its statements
//! are short (sends hold no connection).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::connection::KeptConnection;
use super::{Done, Queue, lease_from, send, unrecorded};

/// Runs queues until stopped.
pub struct Engine {
    connection: Arc<Mutex<KeptConnection>>,
    poll_interval: Duration,
    stop: CancellationToken,
    queues: JoinSet<()>,
}

/// Tells a running queue that rows may be due now (this process just
/// enqueued some), so that it claims without waiting for its poll interval.
#[derive(Debug, Clone, Default)]
pub struct Wake(Arc<Notify>);

impl Wake {
    /// Wakes the queue; a wake while it is busy is kept for its next wait.
    pub fn wake(&self) {
        self.0.notify_one();
    }
}

impl Engine {
    /// An engine on `pool` whose idle queues look for due rows every
    /// `poll_interval`.
    pub fn new(pool: PgPool, poll_interval: Duration) -> Engine {
        Engine {
            connection: Arc::new(Mutex::new(KeptConnection::new(pool))),
            poll_interval,
            stop: CancellationToken::new(),
            queues: JoinSet::new(),
        }
    }

    /// Starts running `queue`; the handle wakes it.
    pub fn spawn<Q: Queue>(&mut self, queue: Q) -> Wake {
        let wake = Wake::default();
        self.queues.spawn(run(
            Arc::new(queue),
            self.connection.clone(),
            self.poll_interval,
            wake.clone(),
            self.stop.clone(),
        ));
        wake
    }

    /// Claims nothing new from now on, and waits for the sends in flight
    /// and their records until `deadline`; past it they are abandoned.
    /// Returns whether everything finished.
    ///
    /// An abandoned send loses nothing: its row stays leased, and the next
    /// claim after the lease (this process's successor, another replica)
    /// sends it. One that had already reached the other side is sent again
    /// then, with the same id.
    pub async fn stop(mut self, deadline: Instant) -> bool {
        self.stop.cancel();
        let drained = tokio::time::timeout_at(deadline, async {
            while let Some(finished) = self.queues.join_next().await {
                if let Err(error) = finished {
                    tracing::error!(%error, "a queue's runner panicked");
                }
            }
        })
        .await
        .is_ok();
        if !drained {
            // Returns once the sends are dropped, and the connection with them.
            self.queues.shutdown().await;
        }
        drained
    }
}

/// One queue's loop.
async fn run<Q: Queue>(
    queue: Arc<Q>,
    connection: Arc<Mutex<KeptConnection>>,
    poll_interval: Duration,
    wake: Wake,
    stop: CancellationToken,
) {
    let mut in_flight: JoinSet<Done<Q::Row, Q::Attempt>> = JoinSet::new();
    let mut may_be_due = true;
    loop {
        let room = queue.capacity().saturating_sub(in_flight.len());
        if may_be_due && room > 0 && !stop.is_cancelled() {
            let now = Utc::now();
            let (lease_until, lease_ends) = lease_from(&*queue, now);
            let claimed = {
                let mut conn = connection.lock().await;
                let claimed = match conn.get().await {
                    Ok(c) => queue.claim(c, now, lease_until, room).await,
                    Err(error) => Err(error),
                };
                if let Err(error) = &claimed {
                    conn.failed(error);
                }
                claimed
            };
            match claimed {
                Ok(jobs) => {
                    // A full claim may have left more behind.
                    may_be_due = jobs.len() == room;
                    for job in jobs {
                        let queue = queue.clone();
                        in_flight.spawn(async move { send(&*queue, job, now, lease_ends).await });
                    }
                }
                Err(error) => {
                    tracing::warn!(queue = queue.name(), %error, "claim failed; trying again after the poll interval");
                    may_be_due = false;
                }
            }
        }
        if stop.is_cancelled() && in_flight.is_empty() {
            break;
        }
        tokio::select! {
            Some(first) = in_flight.join_next(), if !in_flight.is_empty() => {
                let mut done = Vec::new();
                for finished in std::iter::once(first).chain(std::iter::from_fn(|| in_flight.try_join_next())) {
                    match finished {
                        Ok(finished) => done.push(finished),
                        // Its row stays leased, and is sent again once the lease expires.
                        Err(error) => tracing::error!(queue = queue.name(), %error, "a send panicked"),
                    }
                }
                if let Some(lease_ends) = done.iter().map(|d| d.lease_ends).min() {
                    let recorded = connection.lock().await.record(&*queue, &done, lease_ends).await;
                    if let Err(error) = recorded {
                        unrecorded(&*queue, done.len(), &error);
                    }
                }
                may_be_due = true;
            }
            () = wake.0.notified(), if !stop.is_cancelled() => may_be_due = true,
            () = tokio::time::sleep(poll_interval), if !stop.is_cancelled() => may_be_due = true,
            () = stop.cancelled(), if !stop.is_cancelled() => {}
        }
    }
    tracing::info!(queue = queue.name(), "{} worker stopped", queue.name());
}
