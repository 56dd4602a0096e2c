//! The team's application, as the tests see it: an HTTP server on loopback
//! that receives forwarded events, verifies each signature with an
//! independent Standard Webhooks implementation (the `standardwebhooks`
//! crate, not our signer), records what arrived, and answers as told: a
//! status (with `Retry-After`), or nothing at all until released.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// How long a test waits for arrivals before calling it a hang.
const WAIT: Duration = Duration::from_secs(60);

/// What the receiver answers to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// This status, empty body.
    Status(u16),
    /// This status with `Retry-After: <value>`.
    RetryAfter(u16, &'static str),
    /// No answer until [`Receiver::release`] (then 200), as a hung app.
    Hang,
}

/// One request that arrived.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// Every header.
    pub headers: HeaderMap,
    /// The body, byte for byte.
    pub body: Bytes,
    /// What the independent verifier said.
    pub verified: Result<(), String>,
    /// What was answered (200 for a released hang).
    pub answered: u16,
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
    /// Requests being handled, by entity (`data.id` of the body).
    in_flight: Mutex<HashMap<String, usize>>,
    /// The most requests of one entity handled at once.
    most_at_once: Mutex<usize>,
    released: watch::Sender<bool>,
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
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            secret: secret.to_string(),
            arrivals: Mutex::default(),
            script: Mutex::default(),
            otherwise: Mutex::new(Answer::Status(200)),
            arrived: Notify::new(),
            hold: Mutex::default(),
            in_flight: Mutex::default(),
            most_at_once: Mutex::default(),
            released: watch::channel(false).0,
        });
        let app = axum::Router::new().fallback({
            let shared = shared.clone();
            move |headers: HeaderMap, body: Bytes| receive(shared.clone(), headers, body)
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { addr, shared, task }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}/webhooks/inbox", self.addr)
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

    /// Answers every hung request (200), and hangs no more.
    pub fn release(&self) {
        self.shared.released.send_replace(true);
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
        *self.shared.most_at_once.lock().unwrap()
    }
}

async fn receive(shared: Arc<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let verified = standardwebhooks::Webhook::new(&shared.secret)
        .and_then(|webhook| webhook.verify(&body, &headers))
        .map_err(|error| error.to_string());
    let entity = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|json| json["data"]["id"].as_str().map(str::to_string));
    let _handling = entity.map(|entity| Handling::start(&shared, entity));
    let answer =
        shared.script.lock().unwrap().pop_front().unwrap_or_else(|| shared.otherwise.lock().unwrap().clone());
    let hold = *shared.hold.lock().unwrap();
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    let record = |answered: u16| {
        shared.arrivals.lock().unwrap().push(Arrival {
            headers: headers.clone(),
            body: body.clone(),
            verified: verified.clone(),
            answered,
        });
        shared.arrived.notify_waiters();
    };
    match answer {
        Answer::Status(status) => {
            record(status);
            StatusCode::from_u16(status).unwrap().into_response()
        }
        Answer::RetryAfter(status, after) => {
            record(status);
            (StatusCode::from_u16(status).unwrap(), [("retry-after", after)], "slow down").into_response()
        }
        Answer::Hang => {
            // Recorded on arrival, so a test sees the hung request.
            record(200);
            let mut released = shared.released.subscribe();
            let _ = released.wait_for(|released| *released).await;
            StatusCode::OK.into_response()
        }
    }
}

/// A request about an entity being handled, until dropped (answered, or
/// abandoned by a client that gave up).
struct Handling {
    shared: Arc<Shared>,
    entity: String,
}

impl Handling {
    fn start(shared: &Arc<Shared>, entity: String) -> Handling {
        let mut in_flight = shared.in_flight.lock().unwrap();
        let now = in_flight.entry(entity.clone()).or_default();
        *now += 1;
        let mut most = shared.most_at_once.lock().unwrap();
        *most = (*most).max(*now);
        Handling { shared: shared.clone(), entity }
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        *self.shared.in_flight.lock().unwrap().get_mut(&self.entity).unwrap() -= 1;
    }
}
