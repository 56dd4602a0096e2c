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
//! statement and one commit ([`record_together`]): under load that spends
//! far fewer commits than deliveries; alone, a delivery is taken at once and
//! waits for nothing. Deliveries with side effects each run a transaction
//! that may wait on another one's locks (up to `lock_timeout`), so their lane
//! has many workers, and those waits never hold up the recording lane. Both
//! are measured in bench/RESULTS.md.
//!
//! And since a delivery runs in a worker, not in the request, a client that
//! disconnects cannot cancel it half way; shutdown closes the queues and
//! waits for what is in them.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span};

use super::{InboxError, Outcome, Routed, ToApply, ToRecord, apply, record, record_together};

/// Connections of the pool left to everything else: one for the outbox
/// worker (it holds its connection through a round of sends), the others
/// for readiness, metrics, retention and the admin API.
pub const RESERVED_CONNECTIONS: u32 = 3;

/// Workers of the recording lane. Few, so that deliveries queue behind them
/// and are recorded together.
pub const RECORDERS: u32 = 2;

/// The smallest pool the workers run on: the reserved connections, the
/// recorders, and one worker for deliveries with side effects.
pub const MIN_POOL_SIZE: u32 = RESERVED_CONNECTIONS + RECORDERS + 1;

/// Deliveries waiting in a lane at most; more are answered 503 at once.
const QUEUE_CAPACITY: usize = 1024;

/// Longest a worker spends on what it took. Each statement is bounded by
/// `statement_timeout` and each lock wait by `lock_timeout` on the server;
/// this bounds the rest (a database host that stopped answering).
const JOB_DEADLINE: Duration = Duration::from_secs(60);

/// How long a worker keeps one connection before handing it back to the
/// pool (which retires connections past their lifetime) for a fresh one.
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(30 * 60);

/// The two lanes and their workers. Cheap to clone.
#[derive(Clone)]
pub struct Workers {
    recording: Lane<ToRecord>,
    applying: Lane<ToApply>,
}

impl Workers {
    /// Starts [`RECORDERS`] recording workers and, for deliveries with
    /// effects, one worker per remaining pool connection but
    /// [`RESERVED_CONNECTIONS`] (at least one). Workers take their
    /// connection on their first delivery. `fallbacks` counts the batches
    /// recorded one at a time after they failed together.
    pub fn start(pool: PgPool, fallbacks: metrics::Counter) -> Self {
        let appliers =
            pool.options().get_max_connections().saturating_sub(RESERVED_CONNECTIONS + RECORDERS).max(1);
        Workers {
            recording: Lane::start(&pool, RECORDERS, fallbacks),
            applying: Lane::start(&pool, appliers, ()),
        }
    }

    /// Runs a delivery in its lane and returns once it has committed (or
    /// failed). Once a worker has taken it, it runs to its end even if the
    /// caller stops waiting. If no worker takes it within the lane's wait
    /// bound (the pool's acquire timeout), it is given up: `Overloaded`.
    pub async fn deliver(&self, delivery: Routed) -> Result<Outcome, InboxError> {
        match delivery {
            Routed::Record(delivery) => self.recording.deliver(delivery).await,
            Routed::Apply(delivery) => self.applying.deliver(delivery).await,
        }
    }

    /// Refuses new deliveries, lets the workers finish the queued ones, and
    /// waits for them to exit.
    pub async fn close(&self) {
        self.recording.shared.close();
        self.applying.shared.close();
        self.recording.shared.tasks.wait().await;
        self.applying.shared.tasks.wait().await;
    }
}

/// What a lane's workers do with the deliveries they take, by lane.
trait Kind: Sized + Send + Sync + 'static {
    /// Most deliveries a worker takes at once.
    const BATCH: usize;
    /// What the lane's work needs besides the connection.
    type State: Send + Sync + 'static;

    /// Runs `jobs` on `conn`; one answer per job, in order.
    fn run<'a>(
        state: &'a Self::State,
        conn: &'a mut PgConnection,
        jobs: &'a [Job<Self>],
    ) -> impl Future<Output = Vec<Result<Outcome, InboxError>>> + Send + 'a;
}

impl Kind for ToRecord {
    const BATCH: usize = 64;
    type State = metrics::Counter;

    /// Alone, in its request's span; several, in one statement.
    async fn run(
        fallbacks: &metrics::Counter,
        conn: &mut PgConnection,
        jobs: &[Job<Self>],
    ) -> Vec<Result<Outcome, InboxError>> {
        if let [job] = jobs {
            return vec![record(conn, &job.delivery).instrument(job.span.clone()).await];
        }
        let deliveries: Vec<&ToRecord> = jobs.iter().map(|job| &job.delivery).collect();
        record_together(conn, &deliveries, fallbacks).await
    }
}

impl Kind for ToApply {
    const BATCH: usize = 1;
    type State = ();

    /// One at a time, in its request's span.
    async fn run(_: &(), conn: &mut PgConnection, jobs: &[Job<Self>]) -> Vec<Result<Outcome, InboxError>> {
        let mut results = Vec::with_capacity(jobs.len());
        for job in jobs {
            results.push(apply(&mut *conn, &job.delivery).instrument(job.span.clone()).await);
        }
        results
    }
}

type Reply = oneshot::Sender<Result<Outcome, InboxError>>;

/// A delivery waiting in a lane.
struct Job<K> {
    /// Who has the job: the waiting caller may give it up only while no
    /// worker has taken it, so it is either run or refused, never both.
    claim: Arc<AtomicU8>,
    delivery: K,
    /// The request's span, so the delivery's logs carry its fields.
    span: Span,
    reply: Reply,
}

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const GIVEN_UP: u8 = 2;

impl<K> Job<K> {
    /// Takes the job for a worker, unless its caller gave up waiting.
    fn take(&self) -> bool {
        self.claim.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

struct Lane<K: Kind> {
    sender: mpsc::Sender<Job<K>>,
    shared: Arc<Shared<K>>,
}

impl<K: Kind> Clone for Lane<K> {
    fn clone(&self) -> Self {
        Lane { sender: self.sender.clone(), shared: self.shared.clone() }
    }
}

struct Shared<K: Kind> {
    receiver: Mutex<mpsc::Receiver<Job<K>>>,
    pool: PgPool,
    state: K::State,
    /// How long a delivery may wait for a worker to take it: the pool's
    /// acquire timeout, which is what waiting for a connection means here.
    max_wait: Duration,
    closing: CancellationToken,
    tasks: TaskTracker,
}

impl<K: Kind> Shared<K> {
    fn close(&self) {
        self.closing.cancel();
        self.tasks.close();
    }
}

impl<K: Kind> Lane<K> {
    fn start(pool: &PgPool, workers: u32, state: K::State) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let shared = Arc::new(Shared {
            receiver: Mutex::new(receiver),
            pool: pool.clone(),
            state,
            max_wait: pool.options().get_acquire_timeout(),
            closing: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        for _ in 0..workers {
            shared.tasks.spawn(work(shared.clone()));
        }
        Lane { sender, shared }
    }

    async fn deliver(&self, delivery: K) -> Result<Outcome, InboxError> {
        let (reply, mut answer) = oneshot::channel();
        let claim = Arc::new(AtomicU8::new(QUEUED));
        let job = Job { claim: claim.clone(), delivery, span: Span::current(), reply };
        self.sender.try_send(job).map_err(|_| InboxError::Overloaded)?;
        let answered = tokio::select! {
            answered = &mut answer => answered,
            () = tokio::time::sleep(self.shared.max_wait) => {
                if claim.compare_exchange(QUEUED, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return Err(InboxError::Overloaded);
                }
                // A worker has it: its answer comes (the job has a deadline).
                answer.await
            }
        };
        // Dropped unanswered: the worker gave up on it at its deadline (or
        // panicked outside an effect, whose panics the inbox catches).
        answered.unwrap_or(Err(InboxError::TimedOut))
    }
}

/// One worker: takes what is queued, gives it its connection (taken from
/// the pool on first use, after a failure, and when it has grown old), and
/// keeps the connection.
async fn work<K: Kind>(shared: Arc<Shared<K>>) {
    let mut connection: Option<(PoolConnection<Postgres>, Instant)> = None;
    while let Some(jobs) = next(&shared).await {
        let due: Vec<Job<K>> = jobs.into_iter().filter(Job::take).collect();
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
        let ran = AssertUnwindSafe(tokio::time::timeout(JOB_DEADLINE, run(&shared.state, conn, due)))
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

/// Delivers the jobs and answers each. Returns whether the connection is
/// still good.
async fn run<K: Kind>(state: &K::State, conn: &mut PgConnection, jobs: Vec<Job<K>>) -> bool {
    let results = K::run(state, conn, &jobs).await;
    let kept = !results.iter().any(|result| matches!(result, Err(InboxError::Unavailable(_))));
    for (job, result) in jobs.into_iter().zip(results) {
        let _ = job.reply.send(result);
    }
    kept
}

/// The next jobs: waits for one, then takes whatever else is queued (up to
/// the lane's batch) without waiting. `None` once the queue is closed and empty.
async fn next<K: Kind>(shared: &Shared<K>) -> Option<Vec<Job<K>>> {
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
    while jobs.len() < K::BATCH {
        match receiver.try_recv() {
            Ok(job) => jobs.push(job),
            Err(_) => break,
        }
    }
    Some(jobs)
}
