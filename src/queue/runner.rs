//! The engine's loop: for each queue, sends kept in flight up to its
//! capacity, each outcome recorded as soon as it is known, and a claim
//! whenever there is room and something may be due (after a record, when
//! woken, or every poll interval). `serve` runs it in the background until
//! shutdown; tests run the same loop at a time they choose, until idle.
//!
//! Why continuous rather than rounds: a send that hangs until its timeout
//! (a receiver that stopped answering) must not hold up the other rows of
//! its queue, nor the other queues, as a round waiting for its slowest send
//! would.
//!
//! Every queue's claims and records go through one kept connection: the
//! engine holds one pooled connection whatever it runs, and its statements
//! are short (sends hold no connection).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use sqlx::PgPool;
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::connection::KeptConnection;
use super::{Done, Queue, Verdict, lease_from, send, unrecorded};

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

/// What a queue's loop did: the rows it claimed, and how each send ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows sent.
    pub sent: usize,
    /// Failed sends that will be tried again.
    pub retrying: usize,
    /// Failed sends with no attempt left: the row is dead.
    pub dead: usize,
}

impl Tally {
    fn count(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Sent => self.sent += 1,
            Verdict::Retry(_) => self.retrying += 1,
            Verdict::Dead => self.dead += 1,
        }
    }
}

/// How long a queue's loop runs, and on which clock.
#[derive(Clone)]
enum Until {
    /// As `serve` runs it: on the wall clock, until the engine stops,
    /// looking for due rows when woken or every poll interval.
    Stopped { poll_interval: Duration, wake: Wake, stop: CancellationToken },
    /// At the time `now`, until nothing is in flight and no row is due:
    /// a time a test chose instead of waiting for the clock.
    Idle { now: DateTime<Utc> },
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
        let until =
            Until::Stopped { poll_interval: self.poll_interval, wake: wake.clone(), stop: self.stop.clone() };
        let (connection, poll_interval) = (self.connection.clone(), self.poll_interval);
        self.queues.spawn(async move {
            let queue = Arc::new(queue);
            let tally = supervised(&queue, connection, until, poll_interval).await;
            tracing::info!(
                queue = queue.name(),
                claimed = tally.claimed,
                sent = tally.sent,
                retrying = tally.retrying,
                dead = tally.dead,
                "{} worker stopped",
                queue.name()
            );
        });
        wake
    }

    /// Runs `queue` here, in the same loop as [`spawn`](Engine::spawn), but
    /// with `now` for its clock and until it is idle: until no row is in
    /// flight and its last claim found none due at `now`. Returns what it
    /// did, or the error of a claim that failed (after the sends already in
    /// flight are recorded).
    pub async fn run_until_idle<Q: Queue>(&self, queue: &Arc<Q>, now: DateTime<Utc>) -> sqlx::Result<Tally> {
        match run(queue, self.connection.clone(), Until::Idle { now }).await {
            (tally, None) => Ok(tally),
            (_, Some(error)) => Err(error),
        }
    }

    /// Claims nothing new from now on, and waits for the sends in flight
    /// and their records until `deadline`; past it they are abandoned.
    /// Returns whether everything finished.
    ///
    /// An abandoned send loses nothing: its row stays leased, and the next
    /// claim after the lease (this process's successor, another replica)
    /// sends it. One that had already reached the other side is sent again
    /// then, with the same id.
    pub async fn stop(mut self, deadline: tokio::time::Instant) -> bool {
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

/// Runs `queue`'s loop until it stops, starting it again after a panic.
///
/// Why: a panic (a bug, in a record or a claim) would otherwise end the
/// queue's task silently, and its rows would never be sent again while
/// everything else looked healthy. The panic is logged and counted at once
/// ([`Queue::restarted`]); its rows in flight stay leased and are claimed
/// again when their leases end. Restarts wait the poll interval, doubling
/// after each panic up to a minute, so a panic that repeats does not spin.
async fn supervised<Q: Queue>(
    queue: &Arc<Q>,
    connection: Arc<Mutex<KeptConnection>>,
    until: Until,
    poll_interval: Duration,
) -> Tally {
    let mut wait = poll_interval;
    loop {
        let loop_ = run(queue, connection.clone(), until.clone());
        match AssertUnwindSafe(loop_).catch_unwind().await {
            Ok((tally, _)) => return tally,
            Err(panic) => {
                let message = panic_message(&*panic);
                tracing::error!(
                    queue = queue.name(),
                    panic = message,
                    "the queue's runner panicked: restarting it"
                );
                queue.restarted();
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_RESTART_WAIT);
            }
        }
    }
}

/// Longest wait before a runner that panicked again is started again.
const MAX_RESTART_WAIT: Duration = Duration::from_secs(60);

/// A panic's message, when it is text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("")
}

/// One queue's loop, until `until`: what it did, and, running until idle,
/// the error of a claim that failed.
async fn run<Q: Queue>(
    queue: &Arc<Q>,
    connection: Arc<Mutex<KeptConnection>>,
    until: Until,
) -> (Tally, Option<sqlx::Error>) {
    let mut in_flight: JoinSet<Done<Q::Row, Q::Attempt>> = JoinSet::new();
    let mut tally = Tally::default();
    let mut claim_failed = None;
    let mut may_be_due = true;
    let stopped = || matches!(&until, Until::Stopped { stop, .. } if stop.is_cancelled());
    loop {
        let room = queue.capacity().saturating_sub(in_flight.len());
        if may_be_due && room > 0 && !stopped() && claim_failed.is_none() {
            let now = match &until {
                Until::Stopped { .. } => Utc::now(),
                Until::Idle { now } => *now,
            };
            let (lease_until, lease_ends) = lease_from(&**queue, now);
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
                Ok(rows) => {
                    // A full claim may have left more behind.
                    may_be_due = rows.len() == room;
                    tally.claimed += rows.len();
                    for row in rows {
                        let queue = queue.clone();
                        in_flight.spawn(async move { send(&*queue, row, now, lease_ends).await });
                    }
                }
                Err(error) => {
                    may_be_due = false;
                    match until {
                        Until::Stopped { .. } => {
                            tracing::warn!(queue = queue.name(), %error, "claim failed; trying again after the poll interval")
                        }
                        Until::Idle { .. } => claim_failed = Some(error),
                    }
                }
            }
        }
        if in_flight.is_empty() && (stopped() || (matches!(until, Until::Idle { .. }) && !may_be_due)) {
            break;
        }
        let finished = match &until {
            Until::Stopped { poll_interval, wake, stop } => tokio::select! {
                Some(first) = in_flight.join_next(), if !in_flight.is_empty() => Some(first),
                () = wake.0.notified(), if !stop.is_cancelled() => None,
                () = tokio::time::sleep(*poll_interval), if !stop.is_cancelled() => None,
                () = stop.cancelled(), if !stop.is_cancelled() => None,
            },
            Until::Idle { .. } => in_flight.join_next().await,
        };
        let Some(first) = finished else {
            may_be_due = true;
            continue;
        };
        let mut done = Vec::new();
        for finished in std::iter::once(first).chain(std::iter::from_fn(|| in_flight.try_join_next())) {
            match finished {
                Ok(finished) => done.push(finished),
                // Its row stays leased, and is sent again once the lease expires.
                Err(error) => tracing::error!(queue = queue.name(), %error, "a send panicked"),
            }
        }
        for finished in &done {
            tally.count(finished.verdict);
        }
        if let Some(lease_ends) = done.iter().map(|d| d.lease_ends).min() {
            let recorded = connection.lock().await.record(&**queue, &done, lease_ends).await;
            if let Err(error) = recorded {
                unrecorded(&**queue, done.len(), &error);
            }
        }
        may_be_due = true;
    }
    (tally, claim_failed)
}
