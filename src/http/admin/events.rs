//! `/admin/events`: list, show and reprocess archived deliveries.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::http::error::ApiError;
use crate::http::{AppState, NoQuery, UnknownFields, request_id};
use crate::operations::page::{self, Page};
use crate::operations::query::Received;
use crate::operations::{EventFilter, Reprocessed, bulk, query, reprocess};

use super::listing::Listing;

/// Rows per page of `GET /admin/events` unless `limit` says otherwise.
const PAGE: u32 = 50;
/// Most rows per page.
const MAX_PAGE: u32 = 500;
/// Events per `POST /admin/events/reprocess` unless `limit` says otherwise:
/// the request runs them all before answering.
const BULK: u32 = 100;
/// Most events per bulk request; the CLI has no such bound.
const MAX_BULK: u32 = 1000;

/// `GET /admin/events?status=&provider=&type=&since=&until=&event_id=&where=&limit=&cursor=`:
/// newest first; `next_cursor`, when not null, fetches the next page.
pub async fn list(State(state): State<AppState>, query: RawQuery) -> Result<Json<Page>, ApiError> {
    let Listing { filter, limit, cursor } = Listing::<EventFilter, Received>::read(query, PAGE, MAX_PAGE)?;
    Ok(Json(page::page(&state.pool, &filter, limit, cursor).await?))
}

/// `GET /admin/events/{id}`: every column and the event's other deliveries.
pub async fn show(
    State(state): State<AppState>,
    _: NoQuery,
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
    _: NoQuery,
    headers: HeaderMap,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Json<Reprocessed>, ApiError> {
    let id = archive_id(id)?;
    let reprocessed = reprocess::reprocess(&state.pool, &state.routing, id, request_id(&headers)).await?;
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
    #[serde(flatten)]
    unknown: UnknownFields,
}

/// `POST /admin/events/reprocess`: reprocesses the events matching the
/// filters that are not applied yet, oldest first, up to `limit`; `more`
/// says whether others remain (call again: applied ones drop out).
pub async fn reprocess_matching(
    State(state): State<AppState>,
    _: NoQuery,
    headers: HeaderMap,
    body: Result<Json<Bulk>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(asked) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    asked.unknown.refuse()?;
    if asked.filter.is_empty() {
        return Err(ApiError::BadRequest(
            "a bulk reprocess needs at least one filter, e.g. {\"status\": \"FAILED\", \"since\": \"1d\"}"
                .into(),
        ));
    }
    let limit = asked.limit.unwrap_or(BULK).clamp(1, MAX_BULK);
    let plan = bulk::plan(&state.pool, &asked.filter, limit).await?;
    if asked.dry_run {
        return Ok(Json(json!({ "dry_run": true, "events": plan.events, "more": plan.more })));
    }
    let ran =
        bulk::run(&state.pool, &state.routing, &plan, request_id(&headers), |_| async { Ok(()) }).await?;
    Ok(Json(json!({ "dry_run": false, "results": ran.results, "summary": ran.summary, "more": plan.more })))
}

fn archive_id(id: Result<Path<i64>, PathRejection>) -> Result<i64, ApiError> {
    id.map(|Path(id)| id).map_err(|_| ApiError::BadRequest("the archive id must be an integer".into()))
}
