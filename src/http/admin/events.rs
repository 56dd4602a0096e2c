//! `/admin/events`: list, show and reprocess archived deliveries.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::http::error::ApiError;
use crate::http::{AppState, request_id};
use crate::operations::filter::parsed;
use crate::operations::{EventFilter, Reprocessed, Summary, query, reprocess};

/// Rows per page of `GET /admin/events` unless `limit` says otherwise.
const PAGE: u32 = 50;
/// Most rows per page.
const MAX_PAGE: u32 = 500;
/// Events per `POST /admin/events/reprocess` unless `limit` says otherwise:
/// the request runs them all before answering.
const BULK: u32 = 100;
/// Most events per bulk request; the CLI has no such bound.
const MAX_BULK: u32 = 1000;

/// Pagination parameters of `GET /admin/events`.
#[derive(Deserialize)]
pub struct Page {
    #[serde(default, deserialize_with = "parsed")]
    limit: Option<u32>,
    cursor: Option<String>,
}

/// `GET /admin/events?status=&provider=&type=&since=&event_id=&limit=&cursor=`:
/// newest first; `next_cursor`, when not null, fetches the next page.
pub async fn list(
    State(state): State<AppState>,
    filter: Result<Query<EventFilter>, QueryRejection>,
    page: Result<Query<Page>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(filter) = filter.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let Query(page) = page.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let limit = page.limit.unwrap_or(PAGE).clamp(1, MAX_PAGE);
    let before = page.cursor.as_deref().map(decode_cursor).transpose()?;
    // One row more than the page tells whether there is a next page.
    let mut events = query::list(&state.pool, &filter, limit + 1, before).await?;
    let next_cursor = (events.len() > limit as usize).then(|| {
        events.truncate(limit as usize);
        events.last().map(|last| encode_cursor(last.id))
    });
    Ok(Json(json!({ "events": events, "next_cursor": next_cursor.flatten() })))
}

/// `GET /admin/events/{id}`: every column and the event's other deliveries.
pub async fn show(
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Json<query::Shown>, ApiError> {
    let id = archive_id(id)?;
    let shown = query::show(&state.pool, id).await?.ok_or(ApiError::EventNotFound(id))?;
    Ok(Json(shown))
}

/// `POST /admin/events/{id}/reprocess`: runs that stored delivery again.
/// 200 with the new row's status, FAILED included (the run itself worked).
pub async fn reprocess_one(
    State(state): State<AppState>,
    headers: HeaderMap,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Json<Reprocessed>, ApiError> {
    let id = archive_id(id)?;
    let reprocessed = reprocess::reprocess(&state.pool, &*state.handlers, id, request_id(&headers)).await?;
    Ok(Json(reprocessed))
}

/// Body of `POST /admin/events/reprocess`: the filters, flat, plus these.
#[derive(Deserialize)]
pub struct Bulk {
    #[serde(flatten)]
    filter: EventFilter,
    /// List what would be reprocessed; write nothing.
    #[serde(default)]
    dry_run: bool,
    limit: Option<u32>,
}

/// `POST /admin/events/reprocess`: reprocesses the events matching the
/// filters that are not applied yet, oldest first, up to `limit`; `more`
/// says whether others remain (call again: applied ones drop out).
pub async fn reprocess_matching(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<Bulk>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(bulk) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if bulk.filter.is_empty() {
        return Err(ApiError::BadRequest(
            "a bulk reprocess needs at least one filter, e.g. {\"status\": \"FAILED\", \"since\": \"1d\"}"
                .into(),
        ));
    }
    let limit = bulk.limit.unwrap_or(BULK).clamp(1, MAX_BULK);
    let mut targets = query::reprocessable(&state.pool, &bulk.filter, Some(limit + 1)).await?;
    let more = targets.len() > limit as usize;
    targets.truncate(limit as usize);
    if bulk.dry_run {
        return Ok(Json(json!({ "dry_run": true, "events": targets, "more": more })));
    }
    let mut summary = Summary::default();
    let mut results = Vec::with_capacity(targets.len());
    for target in &targets {
        let reprocessed =
            reprocess::reprocess(&state.pool, &*state.handlers, target.id, request_id(&headers)).await?;
        summary.add(&reprocessed);
        results.push(reprocessed);
    }
    Ok(Json(json!({ "dry_run": false, "results": results, "summary": summary, "more": more })))
}

fn archive_id(id: Result<Path<i64>, PathRejection>) -> Result<i64, ApiError> {
    id.map(|Path(id)| id).map_err(|_| ApiError::BadRequest("the archive id must be an integer".into()))
}

/// An opaque cursor: clients pass back what they were given.
fn encode_cursor(last_id: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("before:{last_id}"))
}

fn decode_cursor(cursor: &str) -> Result<i64, ApiError> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| text.strip_prefix("before:")?.parse().ok())
        .ok_or_else(|| ApiError::BadRequest("invalid cursor".into()))
}
