//! Delivery workers: long-lived tasks that each hold one pooled connection
//! and take verified deliveries from a queue.
//!
//! Why workers instead of a pool checkout per delivery: sqlx pings every
//! connection it takes back, a round trip that also wakes a PostgreSQL
//! backend; a worker keeps its connection until the connection breaks. A
//! connection kept idle may have been ended by the server meanwhile, so a
//! worker checks one that sat idle long, and runs a delivery whose first
//! statement found its connection broken once more on a fresh one.
//!
//! Why a worker runs all that waits: in each lane one worker runs at a
//! time ([`RUNNING_PER_LANE`]); deliveries that arrive while it runs wait,
//! and its next turn runs all of them with one statement
//! ([`record_together`], [`apply_together`]) and one commit (group commit).
//! Under load that costs the database far less per delivery than a
//! transaction each on many connections at once (bench/RESULTS.md); a
//! delivery that finds the worker idle runs at once, alone.
//!
//! Why a lane has more workers than run at once: a delivery may wait on
//! another transaction's locks (up to `lock_timeout`). A worker that has
//! run past [`STALLED_AFTER`] stops counting as running and the next one
//! starts, so a lock wait holds up nothing behind it. Two lanes, because
//! deliveries with side effects hold locks and wait on them far more often
//! than deliveries that are only recorded (one short statement): their lane
//! has a worker per pool connection left, the recording lane
//! [`RECORDERS`], and a wait in one never holds up the other.
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
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::sync::{Mutex, Semaphore, SemaphorePermit, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span};

use super::{
    InboxError, Recorded, Routed, ToApply, ToRecord, apply, apply_together, record, record_together,
};

/// Connections of the pool left to everything else: one for the outbox
/// worker (it holds its connection through a round of sends), the others
/// for readiness, metrics, the archive's upkeep and the admin API.
pub const RESERVED_CONNECTIONS: u32 = 3;

/// Workers of the recording lane: the one running and one to start when
/// it stalls.
pub const RECORDERS: u32 = 2;

/// The smallest pool the workers run on: the reserved connections, the
/// recorders, and one worker for deliveries with side effects.
pub const MIN_POOL_SIZE: u32 = RESERVED_CONNECTIONS + RECORDERS + 1;

/// Workers of a lane that run at once, stalled ones aside. One: on the
/// benchmark's machine, one worker running all that waits beat two and
/// eleven at once, with and without side effects, at 8 and at 30 clients,
/// in deliveries per second and in PostgreSQL's CPU per delivery (issue
/// 24; the rows are in bench/RESULTS.md). One running transaction per lane
/// also never contends for rows with another of its replica.
pub const RUNNING_PER_LANE: usize = 1;

/// How long a worker runs before it stops counting as running, so another
/// may start: far longer than a batch takes (a few milliseconds), far
/// shorter than a lock wait may last (`lock_timeout`).
pub const STALLED_AFTER: Duration = Duration::from_millis(50);

/// Deliveries waiting in a lane at most; more are answered 503 at once.
const QUEUE_CAPACITY: usize = 1024;

/// Longest a worker spends on what it took. Each statement is bounded by
/// `statement_timeout` and each lock wait by `lock_timeout` on the server;
/// this bounds the rest (a database host that stopped answering).
const JOB_DEADLINE: Duration = Duration::from_secs(60);

/// How long a worker's connection may sit idle before it is checked (one
/// ping) before its next use. A session the server ended meanwhile (a
/// restart, a failover, an operator) is then replaced before any delivery
/// runs on it.
const IDLE_CHECK_AFTER: Duration = Duration::from_secs(5);

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
    /// [`RESERVED_CONNECTIONS`] (at least one); in each lane
    /// [`RUNNING_PER_LANE`] run at once. Workers take their connection on
    /// their first delivery. `fallbacks` counts the batches, of either
    /// lane, run one at a time after they failed together.
    pub fn start(pool: PgPool, fallbacks: metrics::Counter) -> Self {
        let appliers =
            pool.options().get_max_connections().saturating_sub(RESERVED_CONNECTIONS + RECORDERS).max(1);
        Workers {
            recording: Lane::start(&pool, RECORDERS, fallbacks.clone()),
            applying: Lane::start(&pool, appliers, fallbacks),
        }
    }

    /// Runs a delivery in its lane and returns once it has committed (or
    /// failed). Once a worker has taken it, it runs to its end even if the
    /// caller stops waiting. If no worker takes it within the lane's wait
    /// bound (the pool's acquire timeout), it is given up: `Overloaded`.
    pub async fn deliver(&self, delivery: Routed) -> Result<Recorded, InboxError> {
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
        jobs: &'a [Queued<Self>],
    ) -> impl Future<Output = Vec<Result<Recorded, InboxError>>> + Send + 'a;
}

impl Kind for ToRecord {
    const BATCH: usize = 64;
    type State = metrics::Counter;

    /// Alone, in its request's span; several, in one statement.
    async fn run(
        fallbacks: &metrics::Counter,
        conn: &mut PgConnection,
        jobs: &[Queued<Self>],
    ) -> Vec<Result<Recorded, InboxError>> {
        if let [job] = jobs {
            return vec![record(conn, &job.delivery).instrument(job.span.clone()).await];
        }
        let deliveries: Vec<&ToRecord> = jobs.iter().map(|job| &job.delivery).collect();
        record_together(conn, &deliveries, fallbacks).await
    }
}

impl Kind for ToApply {
    /// Fewer than the recording lane's: a batch holds the row locks of
    /// all its effects until its one commit.
    const BATCH: usize = 32;
    type State = metrics::Counter;

    /// Alone, in its request's span; several, in one statement per effect.
    async fn run(
        fallbacks: &metrics::Counter,
        conn: &mut PgConnection,
        jobs: &[Queued<Self>],
    ) -> Vec<Result<Recorded, InboxError>> {
        if let [job] = jobs {
            return vec![apply(conn, &job.delivery).instrument(job.span.clone()).await];
        }
        let deliveries: Vec<&ToApply> = jobs.iter().map(|job| &job.delivery).collect();
        apply_together(conn, &deliveries, fallbacks).await
    }
}

type Reply = oneshot::Sender<Result<Recorded, InboxError>>;

/// A delivery waiting in a lane.
struct Queued<K> {
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

impl<K> Queued<K> {
    /// Takes the job for a worker, unless its caller gave up waiting.
    fn take(&self) -> bool {
        self.claim.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

struct Lane<K: Kind> {
    sender: mpsc::Sender<Queued<K>>,
    shared: Arc<Shared<K>>,
}

impl<K: Kind> Clone for Lane<K> {
    fn clone(&self) -> Self {
        Lane { sender: self.sender.clone(), shared: self.shared.clone() }
    }
}

struct Shared<K: Kind> {
    receiver: Mutex<mpsc::Receiver<Queued<K>>>,
    /// One permit per worker that may run at once: a worker takes one
    /// before it takes deliveries, and gives it back when it is done or
    /// has run past [`STALLED_AFTER`].
    running: Semaphore,
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
    /// Starts `workers` workers, [`RUNNING_PER_LANE`] of which run at once.
    fn start(pool: &PgPool, workers: u32, state: K::State) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let shared = Arc::new(Shared {
            receiver: Mutex::new(receiver),
            running: Semaphore::new(RUNNING_PER_LANE),
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

    async fn deliver(&self, delivery: K) -> Result<Recorded, InboxError> {
        let (reply, mut answer) = oneshot::channel();
        let claim = Arc::new(AtomicU8::new(QUEUED));
        let job = Queued { claim: claim.clone(), delivery, span: Span::current(), reply };
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

/// One worker: takes what is queued and runs it on its connection (see
/// [`run_on`]). A job whose first statement found that connection broken
/// (stale: the server ended the session while the worker held it idle)
/// runs once more, on a fresh connection, within the same deadline, so a
/// database restart or failover with nothing in flight costs no 503.
async fn work<K: Kind>(shared: Arc<Shared<K>>) {
    let mut held: Option<Held> = None;
    // Kept from one batch to the next unless the batch stalled, so the
    // lane's work stays on the same connection (and server process).
    let mut running: Option<SemaphorePermit> = None;
    loop {
        let permit = match running.take() {
            Some(permit) => permit,
            // Never closed, so never an error.
            None => match shared.running.acquire().await {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let Some(jobs) = next(&shared).await else { return };
        let due: Vec<Queued<K>> = jobs.into_iter().filter(Queued::take).collect();
        if due.is_empty() {
            running = Some(permit);
            continue;
        }
        let deadline = tokio::time::Instant::now() + JOB_DEADLINE;
        let run = async {
            let stale = run_on(&shared, &mut held, due, deadline, true).await;
            if !stale.is_empty() {
                tracing::info!(
                    deliveries = stale.len(),
                    "connection found broken: running again on a fresh one"
                );
                run_on(&shared, &mut held, stale, deadline, false).await;
            }
        };
        running = until_stalled(permit, run).await;
    }
}

/// Runs `work` holding `running`, and gives it back after, unless `work`
/// ran past [`STALLED_AFTER`] (it waits on a lock, or on a database that
/// stopped answering): then `running` went back to the lane at that
/// moment, so that the next worker need not wait for this one.
async fn until_stalled<'a>(
    running: SemaphorePermit<'a>,
    work: impl Future<Output = ()>,
) -> Option<SemaphorePermit<'a>> {
    let mut work = std::pin::pin!(work);
    if tokio::time::timeout(STALLED_AFTER, &mut work).await.is_ok() {
        return Some(running);
    }
    drop(running);
    work.await;
    None
}

/// A worker's connection: taken from the pool on first use, after a
/// failure, and when it has grown old.
struct Held {
    conn: PoolConnection<Postgres>,
    taken_at: Instant,
    used_at: Instant,
}

/// Runs `jobs` on the worker's connection and answers them, but, if
/// `retry_stale`, those a stale connection failed, which it returns. The
/// connection is kept if it is still good, checked first if it sat idle
/// past [`IDLE_CHECK_AFTER`], and taken from the pool if there is none (a
/// fresh one is never stale: the pool checked it).
async fn run_on<K: Kind>(
    shared: &Shared<K>,
    held: &mut Option<Held>,
    jobs: Vec<Queued<K>>,
    deadline: tokio::time::Instant,
    retry_stale: bool,
) -> Vec<Queued<K>> {
    let (mut current, fresh) = match checked(held.take(), shared.max_wait).await {
        Some(current) => (current, false),
        None => match shared.pool.acquire().await {
            Ok(conn) => (Held { conn, taken_at: Instant::now(), used_at: Instant::now() }, true),
            Err(error) => {
                let lost = InboxError::Unavailable(Arc::new(error));
                for job in jobs {
                    let _ = job.reply.send(Err(InboxError::connection_lost(&lost)));
                }
                return Vec::new();
            }
        },
    };
    // A deadline, because a database that stops answering (a black-holed
    // host) would otherwise hold the worker forever; and a panic here must
    // not end the worker. Either way the jobs' replies are dropped (503) and
    // the connection, in an unknown state, closed.
    let ran = AssertUnwindSafe(tokio::time::timeout_at(
        deadline,
        answer(&shared.state, &mut current.conn, jobs, retry_stale && !fresh),
    ))
    .catch_unwind()
    .await;
    match ran {
        Ok(Ok((true, stale))) => {
            if current.taken_at.elapsed() < MAX_CONNECTION_AGE {
                current.used_at = Instant::now();
                *held = Some(current);
            }
            // Old: back to the pool, which retires it (its max lifetime).
            stale
        }
        Ok(Ok((false, stale))) => {
            current.conn.close_on_drop();
            stale
        }
        _ => {
            current.conn.close_on_drop();
            Vec::new()
        }
    }
}

/// The worker's connection, if it has one that is still good: one idle
/// past [`IDLE_CHECK_AFTER`] is pinged first (bounded by `max_wait`), and
/// closed if that fails. Under load connections never sit idle that long,
/// so this costs no round trip there.
async fn checked(held: Option<Held>, max_wait: Duration) -> Option<Held> {
    let mut held = held?;
    if held.used_at.elapsed() < IDLE_CHECK_AFTER {
        return Some(held);
    }
    match tokio::time::timeout(max_wait, held.conn.ping()).await {
        Ok(Ok(())) => Some(held),
        _ => {
            held.conn.close_on_drop();
            None
        }
    }
}

/// Delivers the jobs and answers each, but, if `retry_stale`, those a
/// stale connection failed, which it returns unanswered. Says whether the
/// connection is still good.
async fn answer<K: Kind>(
    state: &K::State,
    conn: &mut PgConnection,
    jobs: Vec<Queued<K>>,
    retry_stale: bool,
) -> (bool, Vec<Queued<K>>) {
    let results = K::run(state, conn, &jobs).await;
    let kept = !results.iter().any(|result| result.as_ref().is_err_and(InboxError::lost_connection));
    let mut stale = Vec::new();
    for (job, result) in jobs.into_iter().zip(results) {
        match result {
            Err(InboxError::StaleConnection(_)) if retry_stale => stale.push(job),
            result => {
                let _ = job.reply.send(result);
            }
        }
    }
    (kept, stale)
}

/// The next jobs: waits for one, then takes, without waiting, what else
/// is queued, up to the lane's batch: a batch never waits to fill. `None`
/// once the queue is closed and empty.
async fn next<K: Kind>(shared: &Shared<K>) -> Option<Vec<Queued<K>>> {
    let mut receiver = shared.receiver.lock().await;
    let first = tokio::select! {
        biased;
        job = receiver.recv() => job,
        () = shared.closing.cancelled() => {
            receiver.close();
            receiver.recv().await
        }
    };
    let mut jobs = vec![first?];
    while jobs.len() < K::BATCH {
        match receiver.try_recv() {
            Ok(job) => jobs.push(job),
            Err(_) => break,
        }
    }
    Some(jobs)
}
