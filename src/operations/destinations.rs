//! What operators do with destinations: see each one's state and backlog,
//! pause and resume it, send it a test event. The CLI (`destinations ...`),
//! the admin API (`/admin/destinations`) and the console read these.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sqlx::PgPool;
use tracing::instrument;

use crate::destinations::sender::{self, Attempt, ForwardedEvent};
use crate::destinations::store::jobs::record_test;
use crate::destinations::store::state::{self, Overview};
use crate::destinations::{Declaration, Destination, Ordering};

/// One destination: its declaration (when this process has it) and its
/// runtime state.
#[derive(Debug, Clone, Serialize)]
pub struct DestinationView {
    /// The name.
    pub name: String,
    /// Whether the configuration this process read declares it; a name
    /// with jobs but no declaration sends nothing.
    pub declared: bool,
    /// Where it sends (without any userinfo the URL may carry).
    pub url: Option<String>,
    /// Which events it wants.
    pub events: Vec<String>,
    /// `none` or `entity`.
    pub ordering: Option<Ordering>,
    /// One of `state::STATES`: `running`, `paused`, `disabled` (it
    /// answered 410), `circuit_open`, `circuit_half_open`.
    pub state: String,
    /// Since when it is paused.
    pub paused_at: Option<DateTime<Utc>>,
    /// Since when it is disabled by a 410.
    pub disabled_at: Option<DateTime<Utc>>,
    /// Failed attempts in a row.
    pub consecutive_failures: i32,
    /// Until when the circuit is open (in the past: half open).
    pub circuit_open_until: Option<DateTime<Utc>>,
    /// Jobs waiting to be sent or retried.
    pub pending: i64,
    /// Age in seconds of the oldest pending job (0: none).
    pub oldest_pending_secs: f64,
    /// Jobs given up.
    pub dead: i64,
}

/// Every destination that is declared or has state, declared ones first in
/// their declared order.
#[instrument(skip_all)]
pub async fn list(pool: &PgPool, declaration: &Declaration) -> sqlx::Result<Vec<DestinationView>> {
    let rows = state::overview(pool).await?;
    let mut views: Vec<DestinationView> = declaration
        .iter()
        .map(|destination| {
            let row = rows.iter().find(|row| row.name == destination.name);
            view(destination.name.clone(), Some(destination), row)
        })
        .collect();
    for row in rows.iter().filter(|row| declaration.get(&row.name).is_none()) {
        views.push(view(row.name.clone(), None, Some(row)));
    }
    Ok(views)
}

fn view(name: String, declared: Option<&Destination>, row: Option<&Overview>) -> DestinationView {
    DestinationView {
        name,
        declared: declared.is_some(),
        url: declared.map(|d| d.shown_url()),
        events: declared.map(|d| d.events.iter().map(ToString::to_string).collect()).unwrap_or_default(),
        ordering: declared.map(|d| d.ordering),
        // Declared but never started by `serve`: it runs from its first start.
        state: row.map_or("running".into(), |row| row.state.clone()),
        paused_at: row.and_then(|row| row.paused_at),
        disabled_at: row.and_then(|row| row.disabled_at),
        consecutive_failures: row.map_or(0, |row| row.consecutive_failures),
        circuit_open_until: row.and_then(|row| row.circuit_open_until),
        pending: row.map_or(0, |row| row.pending),
        oldest_pending_secs: row.map_or(0.0, |row| row.oldest_pending_secs),
        dead: row.map_or(0, |row| row.dead),
    }
}

/// Why a destination operation did nothing.
#[derive(Debug, thiserror::Error)]
pub enum DestinationError {
    /// No destination has this name (declared or with state).
    #[error("destination {0:?} not found")]
    NotFound(String),
    /// The database.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Pauses `name` (see `state::pause`).
pub async fn pause(pool: &PgPool, declaration: &Declaration, name: &str) -> Result<(), DestinationError> {
    state::declare(pool, declaration).await?;
    state::pause(pool, name).await?.then_some(()).ok_or_else(|| DestinationError::NotFound(name.into()))
}

/// Resumes `name` (see `state::resume`).
pub async fn resume(pool: &PgPool, declaration: &Declaration, name: &str) -> Result<(), DestinationError> {
    state::declare(pool, declaration).await?;
    state::resume(pool, name).await?.then_some(()).ok_or_else(|| DestinationError::NotFound(name.into()))
}

/// What a test event's attempt answered.
#[derive(Debug, Clone, Serialize)]
pub struct TestResult {
    /// The job it was recorded as (`jobs show` shows it).
    pub job_id: i64,
    /// The test event's id.
    pub event_id: String,
    /// The status of the answer, if any.
    pub status: Option<u16>,
    /// Why it failed; `None` for a 2xx.
    pub error: Option<String>,
    /// The first KiB of the answer's body.
    pub body: String,
    /// How long it took, in milliseconds.
    pub duration_ms: f64,
}

/// Sends `destination` a test event now, signed and shaped like a forwarded
/// one (provider `webhook-inbox`, type `webhook-inbox.test`), outside the
/// queue (whether paused or not), and records it like any attempt, as a job
/// of its own (`store::jobs::record_test`); the answer comes back here.
#[instrument(skip_all, fields(destination = %destination.name))]
pub async fn send_test(
    pool: &PgPool,
    client: &reqwest::Client,
    destination: &Destination,
) -> Result<TestResult, DestinationError> {
    const PROVIDER: &str = "webhook-inbox";
    const EVENT_TYPE: &str = "webhook-inbox.test";
    let now = Utc::now();
    let event_id = format!("test_{}", uuid::Uuid::now_v7().simple());
    let body = json!({
        "type": EVENT_TYPE,
        "timestamp": now.to_rfc3339(),
        "data": { "destination": destination.name, "event_id": event_id },
    })
    .to_string();
    let event = ForwardedEvent {
        provider: PROVIDER,
        event_type: EVENT_TYPE,
        event_id: &event_id,
        occurred_at: Some(now),
        body: body.into(),
        attempt: 1,
    };
    let started = std::time::Instant::now();
    let attempt = sender::send(client, destination, &event, now).await;
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    let job_id = record_test(pool, &destination.name, &event, &attempt, duration_ms).await?;
    let Attempt { status, error, body: answer, .. } = attempt;
    Ok(TestResult { job_id, event_id, status, error, body: answer, duration_ms })
}
