//! The queue engine: effects that leave the database (emails, forwards to
//! the team's application) are rows written in a delivery's transaction and
//! sent afterwards, by the same machinery whatever they are.
//!
//! A [`Queue`] says how to claim its due rows, how to send one, and how to
//! record what happened; the engine owns the rest, once for every queue:
//! leases and claim tokens (`sql.rs`), the retry schedule with its jitter
//! and the point where a row is given up (`schedule.rs`), recording on a kept
//! connection until the lease ends (`connection.rs`), and the loop that keeps
//! each queue's sends in flight, drains them at shutdown and abandons them
//! past the deadline (`runner.rs`). Tests run that same loop at a time they
//! choose, until the queue is idle ([`Engine::run_until_idle`]).
//!
//! Sending is at least once: a process that dies between a send and its
//! record leaves a lease that expires, and the row is sent again. Everything
//! else (several processes, replicas, retries, a busy database) sends each
//! row once, because a claim takes rows with `FOR UPDATE SKIP LOCKED` and a
//! record only touches a row its own claim still holds.

mod connection;
mod runner;
mod schedule;
pub mod sql;
mod step;

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

pub use runner::{Engine, Tally, Wake};
pub use schedule::{InvalidSchedule, Schedule};

/// A kind of row the engine sends: how to claim, send and record it.
pub trait Queue: Send + Sync + 'static {
    /// A claimed row of this queue, with what sending it needs.
    type Row: ClaimedRow;
    /// What one send did.
    type Attempt: SendResult;

    /// What the logs call it: `outbox`, `destination <name>`.
    fn name(&self) -> &str;

    /// Most rows of this queue in flight at once in this process.
    fn capacity(&self) -> usize;

    /// How many claimed rows may wait in this process beyond
    /// [`capacity`](Queue::capacity), to start as sends end without a claim
    /// each time. 0 (the default) where a claim spends something a waiting
    /// row must not hold (a rate limit's tokens).
    fn ahead(&self) -> usize {
        0
    }

    /// How long a claim is leased: longer than any send can take, so that a
    /// row is only claimed again once its sender is surely done or dead.
    fn lease(&self) -> Duration;

    /// When a failed row is tried again, and when it is given up.
    fn schedule(&self) -> &Schedule;

    /// Claims up to `limit` rows due at `now`, leased until `lease_until`,
    /// counting the attempt, in one statement (see [`sql`]).
    fn claim(
        &self,
        conn: &mut PgConnection,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        limit: usize,
    ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send;

    /// Sends one row; never fails, the failure is in the attempt.
    fn send(&self, row: &Self::Row) -> impl Future<Output = Self::Attempt> + Send;

    /// Records what happened to `done`, in one statement. Safe to repeat:
    /// it may run again after an error, and only rows still held by their
    /// claim change.
    fn record(
        &self,
        conn: &mut PgConnection,
        done: &[Done<Self::Row, Self::Attempt>],
    ) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// Gives back `rows`, claimed but not sent, in one statement (see
    /// [`sql`]): due again, their attempt not counted. Safe to repeat, as
    /// [`record`](Queue::record) is.
    fn release(
        &self,
        conn: &mut PgConnection,
        rows: &[Self::Row],
    ) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// The span a row's send and its logs run in, naming the row.
    fn span(&self, row: &Self::Row) -> tracing::Span;

    /// Reports a settled row (logs, metrics), once, before it is recorded.
    fn report(&self, done: &Done<Self::Row, Self::Attempt>);

    /// Reports that the queue's runner panicked and is started again
    /// (metrics); the engine has logged it.
    fn restarted(&self) {}
}

/// A row a queue's claim returned: what the engine needs of every one.
pub trait ClaimedRow: Send + Sync + 'static {
    /// The row's primary key.
    type Id: for<'q> sqlx::Encode<'q, sqlx::Postgres>
        + sqlx::Type<sqlx::Postgres>
        + sqlx::postgres::PgHasArrayType
        + Copy
        + Send
        + Sync;

    /// The row.
    fn id(&self) -> Self::Id;

    /// Proves the claim is still this one when recording.
    fn claim_token(&self) -> Uuid;

    /// Which attempt of the retry schedule this is, 1 for the first.
    fn attempt(&self) -> u32;

    /// Whether, claimed ahead, the row yields its place to rows claimed
    /// after it that do not (a backfilled job to live ones): without it, a
    /// live row claimed first by its claim would still start behind every
    /// row already waiting.
    fn yields(&self) -> bool {
        false
    }
}

/// What one send of a queue reports to the engine: whether it failed, and why.
pub trait SendResult: Send + Sync + 'static {
    /// `None` when the row was sent, else why not.
    fn failure(&self) -> Option<SendFailure<'_>>;
}

/// Why a send failed, as its queue's attempt reports it.
#[derive(Debug, Clone, Copy)]
pub struct SendFailure<'a> {
    /// One line for the row's `last_error`; never a secret, never a payload.
    pub error: &'a str,
    /// How long the other side asked us to wait (`Retry-After`); replaces
    /// the schedule's delay, which still decides when the row is given up.
    pub retry_after: Option<Duration>,
}

/// A queue row's `status`: the one list of the values every queue table
/// stores (`sql.rs`), and that operators filter jobs by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Waiting to be sent, or to be tried again.
    Pending,
    /// Sent: the other side accepted it.
    Sent,
    /// Given up after the retry schedule.
    Dead,
}

impl Status {
    /// Every status, in the order a row goes through them.
    pub const ALL: [Status; 3] = [Status::Pending, Status::Sent, Status::Dead];

    /// The value stored in the column.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Sent => "sent",
            Status::Dead => "dead",
        }
    }

    /// The value as an SQL string literal (`'pending'`), for the statements
    /// that name a status.
    pub fn literal(self) -> String {
        format!("'{}'", self.as_str())
    }
}

impl std::str::FromStr for Status {
    type Err = String;

    /// Case-insensitive.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        crate::names::one_of(text, &Status::ALL, |status| status.as_str())
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the engine decides of a row after a send: sent, tried again at a
/// time, or given up (dead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Sent: done.
    Sent,
    /// Failed; pending again from this time.
    Retry(DateTime<Utc>),
    /// Failed, and the schedule has no attempt left: given up.
    Dead,
}

impl Verdict {
    /// The row's `status` after it.
    pub fn status(self) -> Status {
        match self {
            Verdict::Sent => Status::Sent,
            Verdict::Retry(_) => Status::Pending,
            Verdict::Dead => Status::Dead,
        }
    }

    /// Decides the verdict on `attempt` of `row`, made at `now`.
    pub fn of<R: ClaimedRow, A: SendResult>(
        schedule: &Schedule,
        row: &R,
        attempt: &A,
        now: DateTime<Utc>,
    ) -> Verdict {
        let Some(failure) = attempt.failure() else { return Verdict::Sent };
        match schedule.delay_after(row.attempt()) {
            None => Verdict::Dead,
            Some(delay) => {
                let delay = failure.retry_after.map_or(delay, |asked| asked.min(schedule.longest_wait()));
                Verdict::Retry(now + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX))
            }
        }
    }
}

/// A row that was sent (or tried), ready to be recorded.
#[derive(Debug)]
pub struct Done<R, A> {
    /// When the claim's lease ends, on this process's clock.
    lease_ends: tokio::time::Instant,
    /// The claimed row.
    pub row: R,
    /// What the send did.
    pub attempt: A,
    /// What becomes of the row.
    pub verdict: Verdict,
    /// When the send started, on the engine's clock.
    pub started_at: DateTime<Utc>,
    /// How long it took; a retry's delay counts from its end.
    pub duration: Duration,
}

impl<R: ClaimedRow, A: SendResult> Done<R, A> {
    /// The error for `last_error`, if the send failed.
    pub fn error(&self) -> Option<&str> {
        self.attempt.failure().map(|failure| failure.error)
    }
}

/// The end of a claim made now for `lease`, on the database's terms
/// (`lease_until`, from `now`) and on this process's clock.
fn lease_from(lease: Duration, now: DateTime<Utc>) -> (DateTime<Utc>, tokio::time::Instant) {
    (
        now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX),
        tokio::time::Instant::now() + lease,
    )
}

/// Sends `row` of `queue`, claimed at `now` on the engine's clock (a test's
/// chosen time, or the wall clock), in its span, and settles it by the
/// schedule.
async fn send<Q: Queue>(
    queue: &Q,
    row: Q::Row,
    now: DateTime<Utc>,
    lease_ends: tokio::time::Instant,
) -> Done<Q::Row, Q::Attempt> {
    use tracing::Instrument;
    let span = queue.span(&row);
    let started = std::time::Instant::now();
    let attempt = queue.send(&row).instrument(span.clone()).await;
    let duration = started.elapsed();
    let ended = now + chrono::Duration::from_std(duration).unwrap_or_default();
    let verdict = Verdict::of(queue.schedule(), &row, &attempt, ended);
    let done = Done { lease_ends, row, attempt, verdict, started_at: now, duration };
    span.in_scope(|| queue.report(&done));
    done
}

/// Logs records that could not be made before their lease ends.
fn unrecorded<Q: Queue>(queue: &Q, rows: usize, error: &sqlx::Error) {
    tracing::error!(queue = queue.name(), rows, %error,
        "could not record sends before their lease ends: once it expires they are sent again \
         (with the same id, so the receiver can tell)");
}
