//! Fake Paddle and Stripe event APIs and a fake GitHub hook deliveries API
//! on loopback (axum), implementing what their documentation says of
//! `GET /events`, `GET /v1/events` and GitHub's `GET .../hooks/{id}/deliveries`
//! and `POST .../deliveries/{id}/attempts`: bearer authentication (401 with
//! the provider's error body), pagination (Paddle `after` +
//! `meta.pagination.next`, oldest first; Stripe `created[gte]` +
//! `starting_after`, newest first; GitHub newest first, `per_page` and a
//! `cursor` in the `Link` header's `rel="next"`), request ids; plus faults
//! a test scripts by request number (429 with `Retry-After`, 500, 403), pages
//! that list an event again, a gate that holds requests until opened, and
//! when each request was answered (to measure the client's waits).
//!
//! The fake GitHub redelivers as GitHub does, by POSTing the delivery,
//! signed with the hook's secret (`support::signing`, its own HMAC), to the
//! service's real socket: before answering 202, so that a test knows the
//! redelivery has been answered once the run has ended; or, held, when the
//! test says (GitHub sends it some time after the 202).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Path;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

/// A scripted answer instead of the page.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// 429 with `Retry-After: <secs>`.
    RateLimited(u64),
    /// 500 Internal Server Error.
    ServerError,
    /// 403 Forbidden without `Retry-After`: the key is valid but not
    /// allowed to read (a Paddle key without the events permission, a
    /// Stripe restricted key without read access to events).
    Forbidden,
}

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its path.
    pub path: String,
    /// Its query parameters.
    pub query: HashMap<String, String>,
    /// Whether its bearer key was the right one.
    pub authorized: bool,
    /// When it passed the gate to be answered (a fault is answered then).
    pub answered_at: Instant,
}

#[derive(Default)]
struct Inner {
    /// Paddle: in log order (ascending id). Stripe: any order; served newest first.
    events: Vec<Value>,
    faults: HashMap<usize, Fault>,
    received: Vec<Received>,
    /// Each next page starts at the previous page's last event (listed
    /// twice): Paddle's names it, Stripe's is `starting_after` it.
    repeat_across_pages: bool,
    /// Most events a page, whatever the request asks (smaller than the real cap, for many pages).
    page_cap: usize,
    /// Requests being answered now, and the most there ever were at once.
    in_flight: usize,
    max_in_flight: usize,
    /// GitHub: each delivery's event header and body, by guid.
    webhooks: HashMap<String, (String, Value)>,
    /// GitHub: the service's URL redeliveries are POSTed to.
    redeliver_to: Option<String>,
    /// GitHub: the guids redelivered.
    redelivered: Vec<String>,
    /// GitHub: redeliveries wait in `held` until the test sends them.
    hold_redeliveries: bool,
    held: Vec<String>,
}

/// A request being answered: counted in flight until dropped.
struct InFlight(Arc<Mutex<Inner>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.lock().unwrap().in_flight -= 1;
    }
}

/// A fake provider API.
#[derive(Clone)]
pub struct FakeApi {
    pub addr: SocketAddr,
    key: &'static str,
    inner: Arc<Mutex<Inner>>,
    /// Requests wait while this is false.
    gate: watch::Sender<bool>,
    /// Notified at each request's arrival.
    pub arrived: Arc<Notify>,
}

/// The key the fakes accept.
pub const API_KEY: &str = "pdl_apikey_test_0123456789";

impl FakeApi {
    /// A fake Paddle `/events` serving `events` (in log order).
    pub async fn paddle(events: Vec<Value>) -> FakeApi {
        Self::start(events, Router::new().route("/events", get(paddle_events))).await
    }

    /// A fake Stripe `/v1/events` serving `events`.
    pub async fn stripe(events: Vec<Value>) -> FakeApi {
        Self::start(events, Router::new().route("/v1/events", get(stripe_events))).await
    }

    /// A fake GitHub serving the delivery attempts `attempts` (`id`,
    /// `guid`, `delivered_at`, ...) of hook 42 of repository `octo/inbox`
    /// and of organization `octo`.
    pub async fn github(attempts: Vec<Value>) -> FakeApi {
        let routes = Router::new()
            .route("/repos/octo/inbox/hooks/42/deliveries", get(github_deliveries))
            .route("/orgs/octo/hooks/42/deliveries", get(github_deliveries))
            .route("/repos/octo/inbox/hooks/42/deliveries/{id}/attempts", post(github_redeliver))
            .route("/orgs/octo/hooks/42/deliveries/{id}/attempts", post(github_redeliver));
        Self::start(attempts, routes).await
    }

    /// GitHub: redelivers to the service at `url`, `guid` being an `event`
    /// event with body `body`.
    pub fn redeliver_to(&self, url: &str, webhooks: impl IntoIterator<Item = (String, String, Value)>) {
        let mut inner = self.inner.lock().unwrap();
        inner.redeliver_to = Some(url.to_string());
        inner.webhooks.extend(webhooks.into_iter().map(|(guid, event, body)| (guid, (event, body))));
    }

    /// GitHub: answers redelivery requests 202 and sends nothing until
    /// [`FakeApi::send_held`] (GitHub sends a redelivery some time later).
    pub fn hold_redeliveries(&self) {
        self.inner.lock().unwrap().hold_redeliveries = true;
    }

    /// GitHub: sends the redeliveries held, in the order asked.
    pub async fn send_held(&self) {
        let held = std::mem::take(&mut self.inner.lock().unwrap().held);
        for guid in held {
            self.send_again(&guid).await;
        }
    }

    /// GitHub: POSTs delivery `guid` to the service, signed, and lists the
    /// attempt (a new id, `redelivery: true`, the same guid).
    async fn send_again(&self, guid: &str) {
        let (target, webhook) = {
            let inner = self.inner.lock().unwrap();
            (inner.redeliver_to.clone(), inner.webhooks.get(guid).cloned())
        };
        let (Some(target), Some((event, body))) = (target, webhook) else { return };
        let delivery = super::signing::github(guid, &event, &body);
        let mut request = webhook_inbox::client::build().post(format!("{target}{}", delivery.path));
        for (name, value) in &delivery.headers {
            request = request.header(name, value);
        }
        let status = request.body(delivery.body).send().await.unwrap().status().as_u16();
        let mut inner = self.inner.lock().unwrap();
        let next_id = inner.events.iter().map(|a| a["id"].as_u64().unwrap()).max().unwrap_or(0) + 1;
        inner.events.push(json!({
            "id": next_id, "guid": guid, "delivered_at": chrono::Utc::now().to_rfc3339(),
            "redelivery": true, "duration": 0.01, "status": "OK", "status_code": status,
            "event": event, "action": body["action"], "installation_id": null, "repository_id": 1
        }));
    }

    /// GitHub: the guids of the redeliveries made (answered 202), in order.
    pub fn redelivered(&self) -> Vec<String> {
        self.inner.lock().unwrap().redelivered.clone()
    }

    async fn start(events: Vec<Value>, routes: Router<FakeApi>) -> FakeApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = FakeApi {
            addr: listener.local_addr().unwrap(),
            key: API_KEY,
            inner: Arc::new(Mutex::new(Inner { events, page_cap: 200, ..Inner::default() })),
            gate: watch::Sender::new(true),
            arrived: Arc::new(Notify::new()),
        };
        let app = routes.with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        fake
    }

    /// The base URL (`PADDLE_API_URL`, `STRIPE_API_URL`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers request number `n` (1-based) with `fault` instead.
    pub fn fault(&self, n: usize, fault: Fault) -> &Self {
        self.inner.lock().unwrap().faults.insert(n, fault);
        self
    }

    /// Serves at most `cap` events a page.
    pub fn page_cap(&self, cap: usize) -> &Self {
        self.inner.lock().unwrap().page_cap = cap;
        self
    }

    /// Lists each page's last event again first on the next page.
    pub fn repeat_across_pages(&self) -> &Self {
        self.inner.lock().unwrap().repeat_across_pages = true;
        self
    }

    /// Adds events to the log (Paddle: at its end).
    pub fn push(&self, events: impl IntoIterator<Item = Value>) {
        self.inner.lock().unwrap().events.extend(events);
    }

    /// Holds every request from now until [`FakeApi::open`].
    pub fn close(&self) {
        self.gate.send_replace(false);
    }

    /// Lets held and further requests through.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }

    /// The most requests that were ever being answered at once.
    pub fn max_in_flight(&self) -> usize {
        self.inner.lock().unwrap().max_in_flight
    }

    /// The requests received so far.
    pub fn received(&self) -> Vec<Received> {
        self.inner.lock().unwrap().received.clone()
    }

    /// How long the client waited between the answer to request `n`
    /// (1-based) and its next request, as seen from here: at least the
    /// wait the client made.
    pub fn wait_after(&self, n: usize) -> Duration {
        let received = self.received();
        received[n].answered_at - received[n - 1].answered_at
    }

    /// Records a request, waits at the gate, and says its number and fault.
    async fn arrive(
        &self,
        path: &str,
        headers: &HeaderMap,
        query: &HashMap<String, String>,
    ) -> (InFlight, usize, bool, Option<Fault>) {
        let authorized = headers.get("authorization").and_then(|v| v.to_str().ok())
            == Some(format!("Bearer {}", self.key).as_str());
        let n = {
            let mut inner = self.inner.lock().unwrap();
            let answered_at = Instant::now();
            inner.received.push(Received {
                path: path.to_string(),
                query: query.clone(),
                authorized,
                answered_at,
            });
            inner.in_flight += 1;
            inner.max_in_flight = inner.max_in_flight.max(inner.in_flight);
            inner.received.len()
        };
        let in_flight = InFlight(self.inner.clone());
        self.arrived.notify_waiters();
        let mut gate = self.gate.subscribe();
        gate.wait_for(|open| *open).await.unwrap();
        let mut inner = self.inner.lock().unwrap();
        inner.received[n - 1].answered_at = Instant::now();
        let fault = inner.faults.get(&n).copied();
        (in_flight, n, authorized, fault)
    }
}

fn fault_response(fault: Fault) -> Response {
    match fault {
        Fault::RateLimited(secs) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", secs.to_string())],
            axum::Json(json!({ "error": { "type": "request_error", "code": "too_many_requests" } })),
        )
            .into_response(),
        Fault::ServerError => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Fault::Forbidden => (
            StatusCode::FORBIDDEN,
            axum::Json(json!({ "error": { "type": "request_error", "code": "forbidden",
                                          "detail": "You aren't permitted to perform this request." } })),
        )
            .into_response(),
    }
}

/// Paddle's `GET /events`: `order_by=id[ASC]`, `after`, `per_page` (≤ 200).
async fn paddle_events(
    State(fake): State<FakeApi>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let (_in_flight, n, authorized, fault) = fake.arrive("/events", &headers, &query).await;
    let request_id = format!("req_paddle_{n}");
    if !authorized {
        let body = json!({
            "error": { "type": "request_error", "code": "authentication_malformed",
                       "detail": "Authentication header included, but incorrectly formatted." },
            "meta": { "request_id": request_id }
        });
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    if let Some(fault) = fault {
        return fault_response(fault);
    }
    if query.get("order_by").is_some_and(|order| order != "id[ASC]") {
        return (StatusCode::BAD_REQUEST, "this fake serves id[ASC] only").into_response();
    }
    let inner = fake.inner.lock().unwrap();
    let per_page =
        query.get("per_page").and_then(|p| p.parse().ok()).unwrap_or(50).min(200).min(inner.page_cap);
    let id = |event: &Value| event["event_id"].as_str().unwrap().to_string();
    let from = match query.get("after") {
        Some(after) => inner.events.iter().position(|event| id(event) > *after).unwrap_or(inner.events.len()),
        None => 0,
    };
    let page: Vec<Value> = inner.events[from..].iter().take(per_page).cloned().collect();
    let has_more = from + page.len() < inner.events.len();
    let next_after = match (inner.repeat_across_pages, page.len()) {
        (true, len) if len >= 2 => id(&page[len - 2]),
        (_, 0) => query.get("after").cloned().unwrap_or_default(),
        (_, len) => id(&page[len - 1]),
    };
    let next = format!("{}/events?after={next_after}&per_page={per_page}&order_by=id%5BASC%5D", fake.url());
    let body = json!({
        "data": page,
        "meta": {
            "request_id": request_id,
            "pagination": { "per_page": per_page, "next": next, "has_more": has_more,
                            "estimated_total": inner.events.len() }
        }
    });
    axum::Json(body).into_response()
}

/// Stripe's `GET /v1/events`: newest first, `created[gte]`, `starting_after`, `limit` (≤ 100).
async fn stripe_events(
    State(fake): State<FakeApi>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let (_in_flight, n, authorized, fault) = fake.arrive("/v1/events", &headers, &query).await;
    let request_id = [("request-id", format!("req_stripe_{n}"))];
    if !authorized {
        let body = json!({ "error": { "type": "invalid_request_error",
                                      "message": "Invalid API Key provided: sk_test_****" } });
        return (StatusCode::UNAUTHORIZED, request_id, axum::Json(body)).into_response();
    }
    if let Some(fault) = fault {
        return fault_response(fault);
    }
    let inner = fake.inner.lock().unwrap();
    let limit = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(10).min(100).min(inner.page_cap);
    let gte: i64 = query.get("created[gte]").and_then(|t| t.parse().ok()).unwrap_or(0);
    let mut events: Vec<&Value> =
        inner.events.iter().filter(|event| event["created"].as_i64().unwrap() >= gte).collect();
    // Newest first; ties by id, descending, so the order is total.
    events.sort_by(|a, b| {
        (b["created"].as_i64(), b["id"].as_str()).cmp(&(a["created"].as_i64(), a["id"].as_str()))
    });
    let from = match query.get("starting_after") {
        Some(after) => match events.iter().position(|event| event["id"] == after.as_str()) {
            Some(at) if inner.repeat_across_pages => at,
            Some(at) => at + 1,
            None => return (StatusCode::BAD_REQUEST, "no such event").into_response(),
        },
        None => 0,
    };
    let page: Vec<Value> = events[from..].iter().take(limit).map(|e| (*e).clone()).collect();
    let has_more = from + page.len() < events.len();
    let body = json!({ "object": "list", "url": "/v1/events", "data": page, "has_more": has_more });
    (request_id, axum::Json(body)).into_response()
}

/// GitHub's answer to a request without a good token.
fn github_unauthorized() -> Response {
    let body = json!({ "message": "Bad credentials", "documentation_url": "https://docs.github.com/rest",
                       "status": "401" });
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

/// GitHub's `GET .../hooks/{id}/deliveries`: newest first (by attempt id),
/// `per_page` (≤ 100), `cursor`; the next page in `Link: <...>; rel="next"`.
async fn github_deliveries(
    State(fake): State<FakeApi>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let (_in_flight, _, authorized, fault) = fake.arrive(uri.path(), &headers, &query).await;
    if !authorized {
        return github_unauthorized();
    }
    if let Some(fault) = fault {
        return fault_response(fault);
    }
    let inner = fake.inner.lock().unwrap();
    let per_page =
        query.get("per_page").and_then(|p| p.parse().ok()).unwrap_or(30).min(100).min(inner.page_cap);
    let mut attempts: Vec<&Value> = inner.events.iter().collect();
    attempts.sort_by_key(|attempt| std::cmp::Reverse(attempt["id"].as_u64().unwrap()));
    let before: u64 = match query.get("cursor").map(|c| c.strip_prefix("v1_").and_then(|id| id.parse().ok()))
    {
        Some(Some(id)) => id,
        Some(None) => return (StatusCode::BAD_REQUEST, "bad cursor").into_response(),
        None => u64::MAX,
    };
    let page: Vec<Value> = attempts
        .into_iter()
        .filter(|attempt| attempt["id"].as_u64().unwrap() < before)
        .take(per_page)
        .cloned()
        .collect();
    let more = page.last().is_some_and(|last| {
        let last = last["id"].as_u64().unwrap();
        inner.events.iter().any(|attempt| attempt["id"].as_u64().unwrap() < last)
    });
    let mut response = axum::Json(page.clone()).into_response();
    if more {
        let cursor = page.last().unwrap()["id"].as_u64().unwrap();
        let link =
            format!("<{}{}?per_page={per_page}&cursor=v1_{cursor}>; rel=\"next\"", fake.url(), uri.path());
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

/// GitHub's `POST .../deliveries/{id}/attempts`: 202, after POSTing the
/// delivery again to the service (a new attempt listed, `redelivery: true`,
/// the same guid).
async fn github_redeliver(
    State(fake): State<FakeApi>,
    Path(id): Path<u64>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let (_in_flight, _, authorized, fault) = fake.arrive(uri.path(), &headers, &HashMap::new()).await;
    if !authorized {
        return github_unauthorized();
    }
    if let Some(fault) = fault {
        return fault_response(fault);
    }
    let guid = {
        let mut inner = fake.inner.lock().unwrap();
        let Some(attempt) = inner.events.iter().find(|attempt| attempt["id"] == id) else {
            return (StatusCode::NOT_FOUND, axum::Json(json!({ "message": "Not Found" }))).into_response();
        };
        let guid = attempt["guid"].as_str().unwrap().to_string();
        inner.redelivered.push(guid.clone());
        guid
    };
    let hold = fake.inner.lock().unwrap().hold_redeliveries;
    match hold {
        true => fake.inner.lock().unwrap().held.push(guid),
        false => fake.send_again(&guid).await,
    }
    (StatusCode::ACCEPTED, axum::Json(json!({}))).into_response()
}
