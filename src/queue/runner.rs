//! The engine's loop: for each queue, sends kept in flight up to its
//! capacity, started from rows claimed ahead as slots free, and a step
//! (`step.rs`) whenever sends ended, rows must go back, or there is room and
//! something may be due (after a send ends, when woken, or every poll
//! interval). Sends go on while a step runs: a slot that frees meanwhile is
//! refilled from the rows claimed ahead, and the next step records what
//! ended. `serve` runs it in the background until shutdown; tests run the
//! same loop at a time they choose, until idle.
//!
//! Why continuous rather than rounds: a send that hangs until its timeout
//! (a receiver that stopped answering) must not hold up the other rows of
//! its queue, nor the other queues, as a round waiting for its slowest send
//! would.
//!
//! Every queue's claims and records go through one kept connection: the
//! engine holds one pooled connection whatever it runs, and its statements
//! are short (sends hold no connection).

use std::collections::VecDeque;
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
use super::step::{Claim, Step};
use super::{ClaimedRow, Done, Queue, Verdict, lease_from, send, unrecorded};

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
    /// Rows claimed and started (not those given back unsent).
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

    /// Claims nothing new from now on, gives back the rows claimed ahead
    /// that have not started, and waits for the sends in flight and their
    /// records until `deadline`; past it they are abandoned. Returns whether
    /// everything finished.
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

/// A claimed row waiting in this process for a free send slot.
struct Waiting<R> {
    row: R,
    /// When its claim's lease ends, on this process's clock.
    lease_ends: tokio::time::Instant,
    /// Past this it is given back instead of sent: it would have less than
    /// a lease left for its send and record.
    start_by: tokio::time::Instant,
}

/// One queue's loop, until `until`: what it did, and, running until idle,
/// the error of a claim that failed.
///
/// Each turn of the loop starts waiting rows in free slots, then runs a
/// [`Step`] if there is anything to record, give back or claim, then waits
/// for a send to end (or a wake, the poll interval, the stop).
async fn run<Q: Queue>(
    queue: &Arc<Q>,
    connection: Arc<Mutex<KeptConnection>>,
    until: Until,
) -> (Tally, Option<sqlx::Error>) {
    let mut in_flight: JoinSet<Done<Q::Row, Q::Attempt>> = JoinSet::new();
    let mut waiting: VecDeque<Waiting<Q::Row>> = VecDeque::new();
    let mut done: Vec<Done<Q::Row, Q::Attempt>> = Vec::new();
    let mut release: Vec<Q::Row> = Vec::new();
    // What ends, and what waited too long, while a step runs.
    let mut ended: Vec<Done<Q::Row, Q::Attempt>> = Vec::new();
    let mut late: Vec<Q::Row> = Vec::new();
    let mut tally = Tally::default();
    let mut claim_failed = None;
    let mut may_be_due = true;
    let stopped = || matches!(&until, Until::Stopped { stop, .. } if stop.is_cancelled());
    // Once stopping, or after a failed send, nothing more starts.
    let halted = |done: &[Done<Q::Row, Q::Attempt>]| stopped() || done.iter().any(|d| d.error().is_some());
    let now = || match &until {
        Until::Stopped { .. } => Utc::now(),
        Until::Idle { now } => *now,
    };
    loop {
        // Unstarted rows go back now rather than when their lease ends, and
        // after a failed send the step claims them again only if the queue
        // may still send (a circuit that opened, a destination disabled).
        if halted(&done) {
            release.extend(waiting.drain(..).map(|w| w.row));
        }
        start(queue, &mut in_flight, &mut tally, &mut waiting, &mut release, now(), Line::ALL);
        let room = queue.capacity().saturating_sub(in_flight.len());
        let limit = (room + queue.ahead()).saturating_sub(waiting.len());
        let claim = may_be_due && limit > 0 && !stopped() && claim_failed.is_none();
        if claim || !done.is_empty() || !release.is_empty() {
            let now = now();
            // Rows that may wait are leased twice as long: they start within
            // one lease, and keep a whole lease for their send.
            let lease = if limit > room { queue.lease() * 2 } else { queue.lease() };
            let (lease_until, lease_ends) = lease_from(lease, now);
            let step = Step {
                release: &release,
                done: &done,
                claim: claim.then_some(Claim { now, lease_until, limit }),
            };
            let records_end = done.iter().map(|d| d.lease_ends).min();
            let stepped = {
                let mut kept = connection.lock().await;
                let step = step.run(&mut kept, &**queue, records_end);
                tokio::pin!(step);
                // While the step runs (a transaction: round trips and a commit),
                // sends go on: one that ends is joined and its slot refilled from
                // the rows waiting, so the step's time is not every slot's idle
                // time. What ends now is recorded by the next step. After a
                // failed send, or once stopping, nothing more starts: the next
                // turn gives the waiting rows back, as above. While the step
                // claims, rows that yield wait for it: the live rows it may
                // return go first.
                loop {
                    tokio::select! {
                        biased;
                        stepped = &mut step => break stepped,
                        Some(finished) = in_flight.join_next(), if !in_flight.is_empty() => {
                            joined(&**queue, finished, &mut tally, &mut ended);
                            if !halted(&ended) {
                                let line = Line { yielding: !claim };
                                start(queue, &mut in_flight, &mut tally, &mut waiting, &mut late, now, line);
                            }
                        }
                    }
                }
            };
            match stepped {
                Ok(rows) => {
                    // A full claim may have left more behind.
                    may_be_due = claim && rows.len() == limit;
                    let start_by = tokio::time::Instant::now() + queue.lease();
                    for row in rows {
                        wait(&mut waiting, Waiting { row, lease_ends, start_by });
                    }
                }
                Err(error) if !done.is_empty() || !release.is_empty() => {
                    // Any part may be what failed: the sends are recorded
                    // alone, and the claim is made alone in the next turn.
                    if let Some(lease_ends) = records_end {
                        let recorded = connection.lock().await.record(&**queue, &done, lease_ends).await;
                        if let Err(error) = recorded {
                            unrecorded(&**queue, done.len(), &error);
                        }
                    }
                    if !release.is_empty() {
                        tracing::warn!(queue = queue.name(), rows = release.len(), %error,
                            "could not give back unsent rows; they are claimed again when their lease ends");
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
            done.clear();
            release.clear();
            done.append(&mut ended);
            release.append(&mut late);
            if !halted(&done) {
                start(queue, &mut in_flight, &mut tally, &mut waiting, &mut release, now, Line::ALL);
            }
        }
        if !done.is_empty() || !release.is_empty() {
            // Sends ended while the step ran: the next step records them now.
            continue;
        }
        if in_flight.is_empty()
            && waiting.is_empty()
            && release.is_empty()
            && (stopped() || (matches!(until, Until::Idle { .. }) && !may_be_due))
        {
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
        may_be_due = true;
        let Some(first) = finished else { continue };
        for finished in std::iter::once(first).chain(std::iter::from_fn(|| in_flight.try_join_next())) {
            joined(&**queue, finished, &mut tally, &mut done);
        }
    }
    (tally, claim_failed)
}

/// Counts a send that ended and keeps it in `done` to record. A send that
/// panicked is logged: its row stays leased, and is sent again once the
/// lease expires.
fn joined<Q: Queue>(
    queue: &Q,
    finished: Result<Done<Q::Row, Q::Attempt>, tokio::task::JoinError>,
    tally: &mut Tally,
    done: &mut Vec<Done<Q::Row, Q::Attempt>>,
) {
    match finished {
        Ok(finished) => {
            tally.count(finished.verdict);
            done.push(finished);
        }
        Err(error) => tracing::error!(queue = queue.name(), %error, "a send panicked"),
    }
}

/// Puts a claimed row in line: behind the others, but ahead of the rows
/// that yield ([`ClaimedRow::yields`]) unless it yields too. Safe for
/// ordered queues: their claim never takes a row while an earlier one of
/// its key is claimed, waiting or not, so no two waiting rows share a key.
fn wait<R: ClaimedRow>(waiting: &mut VecDeque<Waiting<R>>, row: Waiting<R>) {
    let at = match row.row.yields() {
        true => waiting.len(),
        false => waiting.iter().position(|w| w.row.yields()).unwrap_or(waiting.len()),
    };
    waiting.insert(at, row);
}

/// Which of the waiting rows may start.
#[derive(Clone, Copy)]
struct Line {
    /// Whether rows that yield ([`ClaimedRow::yields`]) may.
    yielding: bool,
}

impl Line {
    /// Every row.
    const ALL: Line = Line { yielding: true };
}

/// Starts waiting rows, in line ([`wait`]) and as `line` allows, while
/// `queue` has free slots; a row that waited too long to start goes to
/// `release`.
fn start<Q: Queue>(
    queue: &Arc<Q>,
    in_flight: &mut JoinSet<Done<Q::Row, Q::Attempt>>,
    tally: &mut Tally,
    waiting: &mut VecDeque<Waiting<Q::Row>>,
    release: &mut Vec<Q::Row>,
    now: DateTime<Utc>,
    line: Line,
) {
    while in_flight.len() < queue.capacity() {
        if !line.yielding && waiting.front().is_some_and(|w| w.row.yields()) {
            break;
        }
        let Some(Waiting { row, lease_ends, start_by }) = waiting.pop_front() else { break };
        if tokio::time::Instant::now() > start_by {
            release.push(row);
            continue;
        }
        tally.claimed += 1;
        let queue = queue.clone();
        in_flight.spawn(async move { send(&*queue, row, now, lease_ends).await });
    }
}
