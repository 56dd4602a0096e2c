//! `/admin/destinations` and `/admin/jobs`: the CLI's `destinations` and
//! `jobs` commands over HTTP.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, RawQuery, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::listing::Listing;
use crate::http::error::ApiError;
use crate::http::{AppState, NoQuery};
use crate::operations::Since;
use crate::operations::backfill::{self, BackfillRange, Backfilled};
use crate::operations::destinations::{self, DestinationView, TestResult};
use crate::operations::filter::{FilterValue, parsed};
use crate::operations::jobs::{self, JobDetail, JobFilter, JobSummary};
use crate::operations::page::Cursor;

/// Jobs per page unless `limit` says otherwise.
const PAGE: u32 = 50;
/// Most jobs per page.
const MAX_PAGE: u32 = 500;
/// Most dead jobs one bulk replay takes; call again for more.
const MAX_REPLAY: u32 = 1000;

/// `GET /admin/destinations`: every destination with its state and backlog.
pub async fn list(State(state): State<AppState>, _: NoQuery) -> Result<Json<Value>, ApiError> {
    let views: Vec<DestinationView> = destinations::list(&state.pool, &state.forwarding.declaration).await?;
    Ok(Json(json!({ "destinations": views })))
}

/// `POST /admin/destinations/{name}/pause`.
pub async fn pause(
    State(state): State<AppState>,
    _: NoQuery,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = destination_name(name)?;
    destinations::pause(&state.pool, &state.forwarding.declaration, &name).await?;
    Ok(Json(json!({ "destination": name, "paused": true })))
}

/// `POST /admin/destinations/{name}/resume`.
pub async fn resume(
    State(state): State<AppState>,
    _: NoQuery,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = destination_name(name)?;
    destinations::resume(&state.pool, &state.forwarding.declaration, &name).await?;
    state.forwarding.wake(&name);
    Ok(Json(json!({ "destination": name, "paused": false })))
}

/// `POST /admin/destinations/{name}/test`: a signed test event, sent now
/// and recorded as a job; 200 with the answer whatever it was.
pub async fn test(
    State(state): State<AppState>,
    _: NoQuery,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<TestResult>, ApiError> {
    let name = destination_name(name)?;
    let destination =
        state.forwarding.declaration.get(&name).ok_or_else(|| ApiError::DestinationNotFound(name.clone()))?;
    Ok(Json(destinations::send_test(&state.pool, &state.forwarding.client, destination).await?))
}

/// Body of `POST /admin/destinations/{name}/backfill`: the CLI's flags.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillBody {
    #[serde(default, deserialize_with = "parsed")]
    since: Option<Since>,
    #[serde(default, deserialize_with = "parsed")]
    until: Option<Since>,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /admin/destinations/{name}/backfill` with `{"since", "until",
/// "dry_run"}`: jobs for the applied events of the range the destination
/// missed, after live ones; 404 for an undeclared destination.
pub async fn backfill(
    State(state): State<AppState>,
    _: NoQuery,
    name: Result<Path<String>, PathRejection>,
    body: Result<Json<BackfillBody>, JsonRejection>,
) -> Result<Json<Backfilled>, ApiError> {
    let name = destination_name(name)?;
    let Json(body) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let since = body.since.ok_or_else(|| ApiError::BadRequest("since is required, e.g. \"30d\"".into()))?;
    let range = BackfillRange { since, until: body.until };
    let done =
        backfill::backfill(&state.pool, &state.forwarding.declaration, &name, range, body.dry_run).await?;
    state.forwarding.wake(&name);
    Ok(Json(done))
}

/// `GET /admin/jobs?destination=&status=&event_id=&since=&until=&limit=&cursor=`: newest first.
pub async fn list_jobs(State(state): State<AppState>, query: RawQuery) -> Result<Json<Value>, ApiError> {
    let Listing { filter, limit, cursor } = Listing::<JobFilter>::read(query, PAGE, MAX_PAGE)?;
    let mut rows: Vec<JobSummary> =
        jobs::list(&state.pool, &filter, limit + 1, cursor.map(Cursor::position)).await?;
    // One row more than the page tells whether there is a next page.
    let next_cursor = (rows.len() > limit as usize).then(|| {
        rows.truncate(limit as usize);
        rows.last().map(|last| Cursor::after(last.id))
    });
    Ok(Json(json!({ "jobs": rows, "next_cursor": next_cursor.flatten() })))
}

/// `GET /admin/jobs/{id}`: the job and every attempt.
pub async fn show_job(
    State(state): State<AppState>,
    _: NoQuery,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Json<JobDetail>, ApiError> {
    let id = job_id(id)?;
    Ok(Json(jobs::show(&state.pool, id).await?.ok_or(ApiError::JobNotFound(id))?))
}

/// `POST /admin/jobs/{id}/replay`: sent again, same `webhook-id`; 409 if pending.
pub async fn replay_job(
    State(state): State<AppState>,
    _: NoQuery,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Json<JobSummary>, ApiError> {
    let job = jobs::replay(&state.pool, job_id(id)?).await?;
    state.forwarding.wake(&job.destination);
    Ok(Json(job))
}

/// Body of `POST /admin/jobs/replay`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkReplay {
    destination: FilterValue,
    #[serde(default, deserialize_with = "parsed")]
    since: Option<Since>,
    #[serde(default, deserialize_with = "parsed")]
    until: Option<Since>,
    limit: Option<u32>,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /admin/jobs/replay`: the dead jobs of a destination created in
/// `[since, until)`, oldest first, up to `limit`; listed only with `dry_run`.
pub async fn replay_dead(
    State(state): State<AppState>,
    _: NoQuery,
    body: Result<Json<BulkReplay>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(bulk) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let limit = bulk.limit.unwrap_or(MAX_REPLAY).clamp(1, MAX_REPLAY);
    let jobs = jobs::replay_dead(&state.pool, &bulk.destination, bulk.since, bulk.until, limit, bulk.dry_run)
        .await?;
    if !bulk.dry_run && !jobs.is_empty() {
        state.forwarding.wake(bulk.destination.as_str());
    }
    Ok(Json(json!({ "dry_run": bulk.dry_run, "jobs": jobs })))
}

fn job_id(id: Result<Path<i64>, PathRejection>) -> Result<i64, ApiError> {
    id.map(|Path(id)| id).map_err(|_| ApiError::BadRequest("the job id must be an integer".into()))
}

/// The destination a path names, checked as every name an operator gives
/// is ([`FilterValue`]); 400 in the API's JSON, never axum's plain text.
fn destination_name(name: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(name) =
        name.map_err(|_| ApiError::BadRequest("the destination name must be UTF-8 text".into()))?;
    let name: FilterValue = name.parse().map_err(|reason: &str| ApiError::BadRequest(reason.into()))?;
    Ok(name.to_string())
}
