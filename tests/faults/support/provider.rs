//! The provider's side: signed events, load from many connections at once,
//! and redelivery until a 2xx, as Paddle and Svix retry.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::signing::{Delivery, paddle, subscription_created};
use super::socket::{self, Response};

/// Most attempts at one event before a test gives up on it.
const MAX_ATTEMPTS: usize = 200;

/// One event as the provider sends it, with what applying it does.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: String,
    pub delivery: Delivery,
    /// `subscription.created`: runs an effect in a transaction and grants
    /// credits. Otherwise an event type without an effect: one
    /// autocommitted statement.
    pub grants: bool,
}

impl Event {
    /// `count` events named after `run`, alternating between the two ways
    /// the inbox records an event (an effect's transaction, one statement).
    pub fn mixed(run: &str, count: usize) -> Vec<Event> {
        (0..count)
            .map(|n| {
                let id = format!("evt_{run}_{n:04}");
                if n % 2 == 0 {
                    let delivery = paddle(&subscription_created(&id, &format!("sub_{run}_{n:04}")));
                    Event { id, delivery, grants: true }
                } else {
                    let body = json!({
                        "event_id": id,
                        "event_type": "customer.updated",
                        "occurred_at": "2024-04-12T10:18:49.621022Z",
                        "data": { "id": format!("ctm_{run}_{n:04}"), "email": "someone@example.com" }
                    });
                    Event { id, delivery: paddle(&body), grants: false }
                }
            })
            .collect()
    }
}

/// One request and what came of it.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub started: Instant,
    pub finished: Instant,
    /// `None`: no answer (refused, reset, closed, timed out).
    pub answer: Option<Response>,
}

impl Attempt {
    /// Whether the provider would call this a success.
    pub fn succeeded(&self) -> bool {
        self.answer.as_ref().is_some_and(Response::is_success)
    }
}

/// Sends `delivery` once to `addr`.
pub async fn attempt(addr: SocketAddr, delivery: &Delivery) -> Attempt {
    let started = Instant::now();
    let answer = socket::send(addr, delivery).await.ok();
    Attempt { started, finished: Instant::now(), answer }
}

/// Counts what a test's provider sent.
#[derive(Debug, Default)]
pub struct Provider {
    sent: AtomicUsize,
}

impl Provider {
    /// Requests sent so far.
    pub fn sent(&self) -> usize {
        self.sent.load(Ordering::SeqCst)
    }

    /// Sends `delivery` once to `addr`, counted.
    pub async fn attempt(&self, addr: SocketAddr, delivery: &Delivery) -> Attempt {
        self.sent.fetch_add(1, Ordering::SeqCst);
        attempt(addr, delivery).await
    }

    /// Sends `delivery` to each of `addrs` in turn until one answers 2xx,
    /// waiting `backoff` between attempts; returns every attempt, the
    /// successful one last.
    pub async fn until_2xx(
        &self,
        addrs: &[SocketAddr],
        delivery: &Delivery,
        backoff: Duration,
    ) -> Vec<Attempt> {
        let mut attempts = Vec::new();
        for n in 0..MAX_ATTEMPTS {
            let attempt = self.attempt(addrs[n % addrs.len()], delivery).await;
            let done = attempt.succeeded();
            attempts.push(attempt);
            if done {
                return attempts;
            }
            tokio::time::sleep(backoff).await;
        }
        panic!("no 2xx after {MAX_ATTEMPTS} attempts: {:?}", attempts.last());
    }

    /// Delivers every event to `addr` until it gets a 2xx, `concurrency` at
    /// a time, waiting `backoff` between attempts, in a task of its own: the
    /// load a fault is injected into. Each event's attempts join the list
    /// once it got its 2xx.
    pub fn load(
        self: &Arc<Self>,
        addr: SocketAddr,
        events: &[Event],
        concurrency: usize,
        backoff: Duration,
    ) -> (tokio::task::JoinHandle<()>, Arc<Mutex<Vec<Attempt>>>) {
        let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();
        let (provider, made) = (self.clone(), attempts.clone());
        let load = tokio::spawn(in_parallel(events.to_vec(), concurrency, move |_, event: Event| {
            let (provider, made) = (provider.clone(), made.clone());
            async move {
                let attempts = provider.until_2xx(&[addr], &event.delivery, backoff).await;
                made.lock().unwrap().extend(attempts);
            }
        }));
        (load, attempts)
    }

    /// Redelivers every event until it gets a 2xx, `concurrency` at a time.
    pub async fn redeliver_all(self: &Arc<Self>, addrs: &[SocketAddr], events: &[Event], concurrency: usize) {
        let deliveries: Vec<Delivery> = events.iter().map(|e| e.delivery.clone()).collect();
        let (provider, addrs) = (self.clone(), Arc::new(addrs.to_vec()));
        in_parallel(deliveries, concurrency, move |_, delivery| {
            let (provider, addrs) = (provider.clone(), addrs.clone());
            async move {
                provider.until_2xx(&addrs, &delivery, Duration::from_millis(20)).await;
            }
        })
        .await;
    }
}

/// Asserts every attempt was answered, 2xx or 503 with `Retry-After`: what
/// a provider may be told while the database is away.
#[track_caller]
pub fn assert_2xx_or_503_with_retry_after(attempts: &[Attempt]) {
    for attempt in attempts {
        let answer = attempt.answer.as_ref().expect("every request answered");
        assert!(
            answer.is_success() || (answer.status == 503 && answer.header("retry-after").is_some()),
            "{answer:?}"
        );
    }
}

/// Runs `job` on each of `jobs` (with its index), `concurrency` at a time.
pub async fn in_parallel<J, F, Fut>(jobs: Vec<J>, concurrency: usize, job: F)
where
    J: Send + 'static,
    F: Fn(usize, J) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let queue = Arc::new(Mutex::new(jobs.into_iter().enumerate().collect::<VecDeque<_>>()));
    let job = Arc::new(job);
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (queue, job) = (queue.clone(), job.clone());
            tokio::spawn(async move {
                loop {
                    let next = queue.lock().unwrap().pop_front();
                    let Some((index, item)) = next else { break };
                    job(index, item).await;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
}

/// A deterministic shuffle (the same order every run, so a failure reproduces).
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed | 1;
    for i in (1..items.len()).rev() {
        // xorshift64
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

/// [`attempt`] in a task of its own, for a request left in flight.
pub fn spawn_attempt(addr: SocketAddr, delivery: &Delivery) -> tokio::task::JoinHandle<Attempt> {
    let delivery = delivery.clone();
    tokio::spawn(async move { attempt(addr, &delivery).await })
}
