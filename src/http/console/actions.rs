//! What an operator does from the console: reprocess one event, or every
//! unapplied FAILED event matching a filter (a dry run first, then a
//! confirmation). Each goes through the operations the CLI and the admin
//! API use, and each reprocessed event gets an audit row.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Redirect, Response};
use minijinja::context;

use super::error::ConsoleError;
use super::pages::{Filters, archive_id};
use super::session::Session;
use super::templates::{render, serde};
use crate::http::{AppState, request_id};
use crate::operations::{Status, audit, bulk, reprocess};

/// Most events one confirmation reprocesses; the page says when more remain.
const BULK: u32 = 500;

/// `POST /console/events/{id}/reprocess`: runs the stored delivery again,
/// then shows the row it wrote.
pub async fn reprocess_one(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Response, ConsoleError> {
    let id = archive_id(id)?;
    let reprocessed = reprocess::reprocess(&state.pool, &state.routing, id, request_id(&headers)).await?;
    audit::record_reprocess(&state.pool, &session.actor(), "reprocess", &reprocessed).await?;
    Ok(Redirect::to(&format!("/console/events/{}", reprocessed.archive_id)).into_response())
}

/// The filters of a bulk reprocess: those given, with the status FAILED.
fn failed_only(query: &str) -> Result<Filters, ConsoleError> {
    let (mut filters, _) = Filters::parse(query)?;
    match filters.filter.status {
        None | Some(Status::Failed) => {}
        Some(_) => return Err(ConsoleError::BadRequest("only FAILED events are reprocessed in bulk".into())),
    }
    filters.filter.status = Some(Status::Failed);
    filters.pairs.retain(|(name, _)| name != "status");
    filters.pairs.push(("status".into(), "FAILED".into()));
    Ok(filters)
}

/// `GET /console/reprocess?<filters>`: the dry run, writing nothing: which
/// events a confirmation would reprocess, and the form to confirm.
pub async fn bulk_dry_run(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, ConsoleError> {
    let filters = failed_only(query.as_deref().unwrap_or(""))?;
    let plan = bulk::plan(&state.pool, &filters.filter, BULK).await?;
    Ok(render(
        "bulk.html",
        context! {
            csrf => session.csrf_token, nav => "events", count => plan.events.len(),
            plan => serde(&plan), fields => serde(&filters.pairs), back => filters.query(&[]), limit => BULK,
        },
    )?)
}

/// `POST /console/reprocess` (the confirmation, with the dry run's filters):
/// plans again (events applied meanwhile drop out) and reprocesses them.
pub async fn bulk_run(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    form: Bytes,
) -> Result<Html<String>, ConsoleError> {
    let form = std::str::from_utf8(&form).map_err(|_| ConsoleError::BadRequest("invalid form".into()))?;
    let filters = failed_only(form)?;
    let plan = bulk::plan(&state.pool, &filters.filter, BULK).await?;
    let actor = session.actor();
    let ran = bulk::run(&state.pool, &state.routing, &plan, request_id(&headers), |reprocessed| {
        let (pool, actor) = (state.pool.clone(), actor.clone());
        async move { Ok(audit::record_reprocess(&pool, &actor, "bulk reprocess", &reprocessed).await?) }
    })
    .await?;
    Ok(render(
        "bulk.html",
        context! {
            csrf => session.csrf_token, nav => "events", ran => serde(&ran), more => plan.more,
            back => filters.query(&[]), limit => BULK,
        },
    )?)
}
