//! Delivery workers: long-lived tasks that each hold one pooled connection
//! and take verified deliveries from a queue.
//!
//! Why workers instead of a pool checkout per delivery: sqlx pings every
//! connection it takes back, a round trip that also wakes a PostgreSQL
//! backend; a worker keeps its connection until the connection breaks.
//!
//! Why two lanes: deliveries of events without side effects are only
//! recorded, one short statement each. Their lane has few workers, and a
//! worker takes everything queued at that moment and records it with one
//! statement and one commit ([`deliver_together`]): under load that spends
//! far fewer commits than deliveries; alone, a delivery is taken at once and
//! waits for nothing. Deliveries with side effects each run a transaction
//! that may wait on another one's locks (up to `lock_timeout`), so their lane
//! has many workers, and those waits never hold up the recording lane. Both
//! are measured in bench/RESULTS.md.
//!
//! And since a delivery runs in a worker, not in the request, a client that
//! disconnects cannot cancel it half way; shutdown closes the queues and
//! waits for what is in them.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span};

use super::{Delivery, Effects, InboxError, Outcome, deliver, deliver_together};
use crate::event::OwnedEvent;
use crate::providers::Provider;

/// Connections of the pool left to everything else: one for the outbox
/// worker (it holds its connection through a round of sends), the others
/// for readiness, metrics, retention and the admin API.
pub const RESERVED_CONNECTIONS: u32 = 3;

/// Workers of the recording lane. Few, so that deliveries queue behind them
/// and are recorded together.
pub const RECORDERS: u32 = 2;

/// Deliveries waiting in a lane at most; more are answered 503 at once.
const QUEUE_CAPACITY: usize = 1024;

/// Most deliveries a recorder takes at once.
const MAX_BATCH: usize = 64;

/// Longest a worker spends on what it took. Each statement is bounded by
/// `statement_timeout` and each lock wait by `lock_timeout` on the server;
/// this bounds the rest (a database host that stopped answering).
const JOB_DEADLINE: Duration = Duration::from_secs(60);

/// How long a worker keeps one connection before handing it back to the
/// pool (which retires connections past their lifetime) for a fresh one.
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(30 * 60);

/// A delivery whose signature checked out and whose event was read.
pub struct Received {
    /// The provider that signed it.
    pub provider: Arc<dyn Provider>,
    /// The event inside it.
    pub event: OwnedEvent,
    /// The raw body, checked to be UTF-8 JSON.
    pub body: Bytes,
    /// The signature header as received.
    pub signature: String,
    /// Which configured secret verified it.
    pub secret_index: usize,
    /// The request id it arrived with.
    pub request_id: Option<String>,
    /// The request's span, so the delivery's logs carry its fields.
    pub span: Span,
}

impl Received {
    fn delivery(&self) -> Delivery<'_> {
        Delivery {
            provider: self.provider.name(),
            event: self.event.as_event(),
            // Checked before the delivery was queued; an empty payload
            // would be refused by PostgreSQL, never stored.
            payload: std::str::from_utf8(&self.body).unwrap_or_default(),
            signature: &self.signature,
            secret_index: Some(self.secret_index),
            request_id: self.request_id.as_deref(),
            reprocess_of: None,
        }
    }
}

/// What became of an accepted delivery.
#[derive(Debug)]
pub struct Accepted {
    /// The committed outcome.
    pub outcome: Outcome,
    /// When the provider says the event happened.
    pub occurred_at: Option<DateTime<Utc>>,
}

type Reply = oneshot::Sender<Result<Accepted, InboxError>>;

struct Job {
    /// Who has the job: the waiting caller may give it up only while no
    /// worker has taken it, so it is either run or refused, never both.
    claim: Arc<AtomicU8>,
    received: Received,
    reply: Reply,
}

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const GIVEN_UP: u8 = 2;

impl Job {
    /// Takes the job for a worker, unless its caller gave up waiting.
    fn take(&self) -> bool {
        self.claim.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// The two lanes and their workers. Cheap to clone.
#[derive(Clone)]
pub struct Workers {
    recording: Lane,
    applying: Lane,
    effects: Arc<dyn Effects>,
}

#[derive(Clone)]
struct Lane {
    sender: mpsc::Sender<Job>,
    shared: Arc<Shared>,
}

struct Shared {
    receiver: Mutex<mpsc::Receiver<Job>>,
    pool: PgPool,
    effects: Arc<dyn Effects>,
    /// How many jobs a worker takes at once.
    batch: usize,
    /// How long a delivery may wait for a worker to take it: the pool's
    /// acquire timeout, which is what waiting for a connection means here.
    max_wait: Duration,
    closing: CancellationToken,
    tasks: TaskTracker,
}

impl Workers {
    /// Starts [`RECORDERS`] recording workers and, for deliveries with
    /// effects, one worker per remaining pool connection but
    /// [`RESERVED_CONNECTIONS`] (at least one). Workers take their
    /// connection on their first delivery.
    pub fn start(pool: PgPool, effects: Arc<dyn Effects>) -> Self {
        let appliers =
            pool.options().get_max_connections().saturating_sub(RESERVED_CONNECTIONS + RECORDERS).max(1);
        Workers {
            recording: Lane::start(&pool, &effects, RECORDERS, MAX_BATCH),
            applying: Lane::start(&pool, &effects, appliers, 1),
            effects,
        }
    }

    /// Records and applies a delivery and returns once it has committed (or
    /// failed). Once a worker has taken it, it runs to its end even if the
    /// caller stops waiting. If no worker takes it within the lane's wait
    /// bound (the pool's acquire timeout), it is given up: `Overloaded`.
    pub async fn deliver(&self, received: Received) -> Result<Accepted, InboxError> {
        let lane = match self.effects.handles(received.provider.name(), received.event.event_type()) {
            true => &self.applying,
            false => &self.recording,
        };
        let (reply, mut answer) = oneshot::channel();
        let claim = Arc::new(AtomicU8::new(QUEUED));
        let job = Job { claim: claim.clone(), received, reply };
        lane.sender.try_send(job).map_err(|_| InboxError::Overloaded)?;
        let answered = tokio::select! {
            answered = &mut answer => answered,
            () = tokio::time::sleep(lane.shared.max_wait) => {
                if claim.compare_exchange(QUEUED, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return Err(InboxError::Overloaded);
                }
                // A worker has it: its answer comes (the job has a deadline).
                answer.await
            }
        };
        // Dropped unanswered: the worker gave up on it at its deadline (or
        // panicked outside a handler, whose panics the inbox catches).
        answered.unwrap_or(Err(InboxError::TimedOut))
    }

    /// Refuses new deliveries, lets the workers finish the queued ones, and
    /// waits for them to exit.
    pub async fn close(&self) {
        for lane in [&self.recording, &self.applying] {
            lane.shared.closing.cancel();
            lane.shared.tasks.close();
        }
        for lane in [&self.recording, &self.applying] {
            lane.shared.tasks.wait().await;
        }
    }
}

impl Lane {
    fn start(pool: &PgPool, effects: &Arc<dyn Effects>, workers: u32, batch: usize) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let shared = Arc::new(Shared {
            receiver: Mutex::new(receiver),
            pool: pool.clone(),
            effects: effects.clone(),
            batch,
            max_wait: pool.options().get_acquire_timeout(),
            closing: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        for _ in 0..workers {
            shared.tasks.spawn(work(shared.clone()));
        }
        Lane { sender, shared }
    }
}

/// One worker: takes what is queued, gives it its connection (taken from
/// the pool on first use, after a failure, and when it has grown old), and
/// keeps the connection.
async fn work(shared: Arc<Shared>) {
    let mut connection: Option<(PoolConnection<Postgres>, Instant)> = None;
    while let Some(jobs) = next(&shared).await {
        let due: Vec<Job> = jobs.into_iter().filter(Job::take).collect();
        if due.is_empty() {
            continue;
        }
        let conn = match &mut connection {
            Some((conn, _)) => conn,
            None => match shared.pool.acquire().await {
                Ok(fresh) => &mut connection.insert((fresh, Instant::now())).0,
                Err(error) => {
                    for job in due {
                        let _ = job.reply.send(Err(InboxError::connection_lost(&error)));
                    }
                    continue;
                }
            },
        };
        // A deadline, because a database that stops answering (a
        // black-holed host) would otherwise hold the worker forever; and
        // a panic here must not end the worker. Either way the jobs' replies
        // are dropped (503) and the connection, in an unknown state, closed.
        let ran = AssertUnwindSafe(tokio::time::timeout(JOB_DEADLINE, run(conn, &*shared.effects, due)))
            .catch_unwind()
            .await;
        match (ran, connection.take()) {
            (Ok(Ok(true)), Some((conn, taken_at))) if taken_at.elapsed() < MAX_CONNECTION_AGE => {
                connection = Some((conn, taken_at));
            }
            // Old: back to the pool, which retires it (its max lifetime).
            (Ok(Ok(true)), old) => drop(old),
            (_, Some((mut broken, _))) => broken.close_on_drop(),
            (_, None) => {}
        }
    }
}

/// Delivers the jobs (those without side effects together, the others one
/// by one in their own request's span) and answers each. Returns whether
/// the connection is still good.
async fn run(conn: &mut PgConnection, effects: &dyn Effects, jobs: Vec<Job>) -> bool {
    let (received, replies): (Vec<Received>, Vec<Reply>) =
        jobs.into_iter().map(|job| (job.received, job.reply)).unzip();
    let deliveries: Vec<Delivery<'_>> = received.iter().map(Received::delivery).collect();
    let results = if let [delivery] = deliveries.as_slice()
        && effects.handles(delivery.provider, &delivery.event.event_type)
    {
        vec![deliver(conn, effects, delivery).instrument(received[0].span.clone()).await]
    } else {
        deliver_together(conn, &deliveries.iter().collect::<Vec<_>>()).await
    };
    let kept = !results.iter().any(|result| matches!(result, Err(InboxError::Unavailable(_))));
    for ((received, reply), result) in received.iter().zip(replies).zip(results) {
        let accepted = result.map(|outcome| Accepted { outcome, occurred_at: received.event.occurred_at() });
        let _ = reply.send(accepted);
    }
    kept
}

/// The next jobs: waits for one, then takes whatever else is queued (up to
/// the lane's batch) without waiting. `None` once the queue is closed and empty.
async fn next(shared: &Shared) -> Option<Vec<Job>> {
    let mut receiver = shared.receiver.lock().await;
    let first = tokio::select! {
        biased;
        job = receiver.recv() => job,
        () = shared.closing.cancelled() => {
            receiver.close();
            receiver.recv().await
        }
    }?;
    let mut jobs = vec![first];
    while jobs.len() < shared.batch {
        match receiver.try_recv() {
            Ok(job) => jobs.push(job),
            Err(_) => break,
        }
    }
    Some(jobs)
}
