//! The team's application, as the tests see it: an HTTP server on loopback
//! that receives forwarded events, verifies each signature with an
//! independent Standard Webhooks implementation (the `standardwebhooks`
//! crate, not our signer), records what arrived, and answers as told: a
//! status (with `Retry-After`), or nothing at all until let through or
//! released (a gate: the requests held there are provably in flight).
//!
//! Shared with the fault suite (`tests/faults`), whose destinations post to
//! several paths of one receiver.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::Uri;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinHandle;

/// How long a test waits for arrivals before calling it a hang.
const WAIT: Duration = Duration::from_secs(60);

/// What the receiver answers to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// This status, empty body.
    Status(u16),
    /// This status with this body.
    Body(u16, &'static str),
    /// This status with `Retry-After: <value>`.
    RetryAfter(u16, &'static str),
    /// No answer until [`Receiver::let_through`] or [`Receiver::release`]
    /// (then 200), as a hung app.
    Hang,
}

/// One request that arrived.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// The path it was posted to.
    pub path: String,
    /// Every header.
    pub headers: HeaderMap,
    /// The body, byte for byte.
    pub body: Bytes,
    /// What the independent verifier said.
    pub verified: Result<(), String>,
    /// What was answered (200 for a released hang).
    pub answered: u16,
    /// Whether it was held ([`Answer::Hang`]): its 200, if it came, may have
    /// found the sender gone.
    pub held: bool,
}

impl Arrival {
    /// A header's value.
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }
}

struct Shared {
    secret: String,
    arrivals: Mutex<Vec<Arrival>>,
    script: Mutex<VecDeque<Answer>>,
    otherwise: Mutex<Answer>,
    arrived: Notify,
    /// Held before answering each request, to make overlaps observable.
    hold: Mutex<Duration>,
    /// Where the entity is in a body (a JSON pointer): `/data/id` unless told.
    entity_at: Mutex<&'static str>,
    /// Requests being handled, by path and entity.
    in_flight: Mutex<HashMap<(String, String), usize>>,
    /// By path, the most requests of one entity handled at once.
    most_at_once: Mutex<HashMap<String, usize>>,
    released: watch::Sender<bool>,
    /// Held requests answer one per permit.
    let_through: Semaphore,
    /// Requests held right now.
    held: Mutex<usize>,
    /// The paths of held requests answered by `let_through`, in order.
    let_through_paths: Mutex<Vec<String>>,
}

/// The receiver; stops when dropped.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// A receiver on a free loopback port verifying with `secret` (`whsec_...`).
    pub async fn start(secret: &str) -> Receiver {
        Receiver::start_on("127.0.0.1:0".parse().unwrap(), secret).await
    }

    /// A receiver on `addr` (a port a test kept closed until now).
    pub async fn start_on(addr: SocketAddr, secret: &str) -> Receiver {
        Receiver::start_with(tokio::net::TcpListener::bind(addr).await.unwrap(), secret)
    }

    /// A receiver on `listener` (bound where the test needs it, e.g. in a
    /// network namespace).
    pub fn start_with(listener: tokio::net::TcpListener, secret: &str) -> Receiver {
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            secret: secret.to_string(),
            arrivals: Mutex::default(),
            script: Mutex::default(),
            otherwise: Mutex::new(Answer::Status(200)),
            arrived: Notify::new(),
            hold: Mutex::default(),
            entity_at: Mutex::new("/data/id"),
            in_flight: Mutex::default(),
            most_at_once: Mutex::default(),
            released: watch::channel(false).0,
            let_through: Semaphore::new(0),
            held: Mutex::default(),
            let_through_paths: Mutex::default(),
        });
        let app = axum::Router::new().fallback({
            let shared = shared.clone();
            move |uri: Uri, headers: HeaderMap, body: Bytes| receive(shared.clone(), uri, headers, body)
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { addr, shared, task }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        self.url_of("/webhooks/inbox")
    }

    /// The URL of `path` on it.
    pub fn url_of(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The next requests get these answers, in order; then the usual one.
    pub fn answer_next(&self, answers: impl IntoIterator<Item = Answer>) {
        self.shared.script.lock().unwrap().extend(answers);
    }

    /// From now on, requests beyond the scripted ones get `answer`.
    pub fn answer_otherwise(&self, answer: Answer) {
        *self.shared.otherwise.lock().unwrap() = answer;
    }

    /// Holds each request this long before answering.
    pub fn hold_each(&self, hold: Duration) {
        *self.shared.hold.lock().unwrap() = hold;
    }

    /// Counts overlaps ([`Receiver::most_at_once_per_entity`]) by the value
    /// at `pointer` in each body (e.g. the customer) instead of `data.id`.
    pub fn entity_at(&self, pointer: &'static str) {
        *self.shared.entity_at.lock().unwrap() = pointer;
    }

    /// Answers every hung request (200), and hangs no more.
    pub fn release(&self) {
        self.shared.released.send_replace(true);
    }

    /// Answers `count` hung requests (200), now or as they come.
    pub fn let_through(&self, count: usize) {
        self.shared.let_through.add_permits(count);
    }

    /// The paths of the held requests [`Receiver::let_through`] answered
    /// so far, in order.
    pub fn let_through_paths(&self) -> Vec<String> {
        self.shared.let_through_paths.lock().unwrap().clone()
    }

    /// How many requests are held right now (hung, their sender still
    /// connected: one that gives up or dies is no longer held).
    pub fn held(&self) -> usize {
        *self.shared.held.lock().unwrap()
    }

    /// Waits until `count` requests are held at once.
    pub async fn until_held(&self, count: usize) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.held() < count {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{count} requests never held: {} are",
                self.held()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Everything that arrived so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.shared.arrivals.lock().unwrap().clone()
    }

    /// Waits until at least `count` requests have arrived.
    pub async fn until_arrivals(&self, count: usize) -> Vec<Arrival> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let arrived = self.shared.arrived.notified();
            let arrivals = self.arrivals();
            if arrivals.len() >= count {
                return arrivals;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!("{count} requests never arrived: {} did", self.arrivals().len());
            }
        }
    }

    /// The most requests about one entity it was handling at the same time.
    pub fn most_at_once_per_entity(&self) -> usize {
        self.shared.most_at_once.lock().unwrap().values().copied().max().unwrap_or_default()
    }

    /// The same, of the requests to `path` only.
    pub fn most_at_once_per_entity_at(&self, path: &str) -> usize {
        self.shared.most_at_once.lock().unwrap().get(path).copied().unwrap_or_default()
    }
}

async fn receive(shared: Arc<Shared>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let path = uri.path().to_string();
    let verified = standardwebhooks::Webhook::new(&shared.secret)
        .and_then(|webhook| webhook.verify(&body, &headers))
        .map_err(|error| error.to_string());
    let entity_at = *shared.entity_at.lock().unwrap();
    let entity = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|json| json.pointer(entity_at)?.as_str().map(str::to_string));
    let _handling = entity.map(|entity| Handling::start(&shared, (path.clone(), entity)));
    let answer =
        shared.script.lock().unwrap().pop_front().unwrap_or_else(|| shared.otherwise.lock().unwrap().clone());
    let hold = *shared.hold.lock().unwrap();
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    let record = |answered: u16, held: bool| {
        shared.arrivals.lock().unwrap().push(Arrival {
            path: path.clone(),
            headers: headers.clone(),
            body: body.clone(),
            verified: verified.clone(),
            answered,
            held,
        });
        shared.arrived.notify_waiters();
    };
    match answer {
        Answer::Status(status) => {
            record(status, false);
            StatusCode::from_u16(status).unwrap().into_response()
        }
        Answer::Body(status, text) => {
            record(status, false);
            (StatusCode::from_u16(status).unwrap(), text).into_response()
        }
        Answer::RetryAfter(status, after) => {
            record(status, false);
            (StatusCode::from_u16(status).unwrap(), [("retry-after", after)], "slow down").into_response()
        }
        Answer::Hang => {
            // Recorded on arrival, so a test sees the hung request.
            record(200, true);
            let _held = Held::start(&shared);
            let mut released = shared.released.subscribe();
            tokio::select! {
                _ = released.wait_for(|released| *released) => {}
                permit = shared.let_through.acquire() => {
                    permit.unwrap().forget();
                    shared.let_through_paths.lock().unwrap().push(path.clone());
                }
            }
            StatusCode::OK.into_response()
        }
    }
}

/// A request about an entity being handled, until dropped (answered, or
/// abandoned by a client that gave up: the server drops the handler when
/// its connection closes).
struct Handling {
    shared: Arc<Shared>,
    entity: (String, String),
}

impl Handling {
    fn start(shared: &Arc<Shared>, entity: (String, String)) -> Handling {
        let mut in_flight = shared.in_flight.lock().unwrap();
        let now = in_flight.entry(entity.clone()).or_default();
        *now += 1;
        let mut most = shared.most_at_once.lock().unwrap();
        let most = most.entry(entity.0.clone()).or_default();
        *most = (*most).max(*now);
        Handling { shared: shared.clone(), entity }
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        *self.shared.in_flight.lock().unwrap().get_mut(&self.entity).unwrap() -= 1;
    }
}

/// A request held, until dropped (answered, or abandoned).
struct Held(Arc<Shared>);

impl Held {
    fn start(shared: &Arc<Shared>) -> Held {
        *shared.held.lock().unwrap() += 1;
        Held(shared.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        *self.0.held.lock().unwrap() -= 1;
    }
}
