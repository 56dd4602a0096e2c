//! What an operator does to forwarding from the console: pause or resume a
//! destination, replay one job, or every dead job of a destination (a dry
//! run first, then a confirmation). Each goes through the operations the
//! CLI and the admin API use, wakes the destination's queue as the admin
//! API does, and gets an audit row.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use minijinja::context;
use serde::Deserialize;
use serde_json::json;

use super::error::ConsoleError;
use super::session::Session;
use super::templates::{render, serde};
use crate::http::AppState;
use crate::operations::filter::FilterValue;
use crate::operations::{audit, destinations, jobs};

/// Most dead jobs one confirmation replays; the page says when more remain.
const REPLAY_DEAD: u32 = 500;
/// Most jobs a replay's page lists (the oldest), so it stays under 100 KB.
const LISTED: usize = 100;

/// `POST /console/destinations/{name}/pause`: nothing is sent to it until resumed.
pub async fn pause(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Result<Response, ConsoleError> {
    destinations::pause(&state.pool, &state.forwarding.declaration, &name).await?;
    audit::record_destination(&state.pool, &session.actor(), "pause", &name, json!({ "paused": true }))
        .await?;
    Ok(Redirect::to("/console#destinations").into_response())
}

/// `POST /console/destinations/{name}/resume`: sent to again (also after a
/// 410 or with its circuit open), its waiting jobs first.
pub async fn resume(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Result<Response, ConsoleError> {
    destinations::resume(&state.pool, &state.forwarding.declaration, &name).await?;
    state.forwarding.wake(&name);
    audit::record_destination(&state.pool, &session.actor(), "resume", &name, json!({ "paused": false }))
        .await?;
    Ok(Redirect::to("/console#destinations").into_response())
}

/// The form of a job's replay: the event page it was posted from.
#[derive(Deserialize)]
struct ReplayForm {
    event: Option<i64>,
}

/// `POST /console/jobs/{id}/replay` (a sent or dead job): pending again,
/// with the same `webhook-id`; then back to the event's page.
pub async fn replay_job(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    id: Result<Path<i64>, PathRejection>,
    form: Bytes,
) -> Result<Response, ConsoleError> {
    let id = id.map(|Path(id)| id).map_err(|_| ConsoleError::NotFound)?;
    let ReplayForm { event } =
        serde_urlencoded::from_bytes(&form).map_err(|_| ConsoleError::BadRequest("invalid form".into()))?;
    let job = jobs::replay(&state.pool, id).await?;
    state.forwarding.wake(&job.destination);
    audit::record_jobs(&state.pool, &session.actor(), "replay", std::slice::from_ref(&job)).await?;
    // Only ever a path we build from a number.
    let back = event.map_or_else(|| "/console".to_string(), |event| format!("/console/events/{event}"));
    Ok(Redirect::to(&back).into_response())
}

/// `GET /console/destinations/{name}/replay-dead`: the dry run, writing
/// nothing: which dead jobs a confirmation would replay.
pub async fn replay_dead_dry_run(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    let dead = jobs::replay_dead(&state.pool, &named(&name)?, None, None, REPLAY_DEAD + 1, true).await?;
    let more = dead.len() > REPLAY_DEAD as usize;
    let count = dead.len().min(REPLAY_DEAD as usize);
    Ok(render(
        "replay_dead.html",
        context! {
            csrf => session.csrf_token, nav => "overview", destination => name, count, more,
            jobs => serde(&dead[..count.min(LISTED)]), limit => REPLAY_DEAD,
        },
    )?)
}

/// `POST /console/destinations/{name}/replay-dead` (the confirmation):
/// replays the oldest dead jobs as they are now (jobs replayed meanwhile
/// drop out).
pub async fn replay_dead(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    let replayed = jobs::replay_dead(&state.pool, &named(&name)?, None, None, REPLAY_DEAD, false).await?;
    if !replayed.is_empty() {
        state.forwarding.wake(&name);
    }
    audit::record_jobs(&state.pool, &session.actor(), "replay dead", &replayed).await?;
    Ok(render(
        "replay_dead.html",
        context! {
            csrf => session.csrf_token, nav => "overview", destination => name, count => replayed.len(),
            replayed => true, jobs => serde(&replayed[..replayed.len().min(LISTED)]), limit => REPLAY_DEAD,
        },
    )?)
}

/// The destination a path names, checked as every name an operator gives is.
fn named(name: &str) -> Result<FilterValue, ConsoleError> {
    name.parse().map_err(|reason: &str| ConsoleError::BadRequest(reason.into()))
}
