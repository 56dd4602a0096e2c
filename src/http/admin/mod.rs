//! The admin API: the CLI's `events`, `destinations` and `jobs` commands over HTTP, JSON in and out,
//! behind a bearer token. Mounted only when `ADMIN_TOKEN` is set, so without
//! one every `/admin` path answers 404.

mod destinations;
mod events;
mod listing;
mod reconciliation;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

use super::AppState;
use super::error::ApiError;

/// The `/admin` routes, every one behind the token.
pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/events", get(events::list))
        .route("/events/reprocess", post(events::reprocess_matching))
        .route("/events/{id}", get(events::show))
        .route("/events/{id}/reprocess", post(events::reprocess_one))
        .route("/destinations", get(destinations::list))
        .route("/destinations/{name}/pause", post(destinations::pause))
        .route("/destinations/{name}/resume", post(destinations::resume))
        .route("/destinations/{name}/test", post(destinations::test))
        .route("/destinations/{name}/backfill", post(destinations::backfill))
        .route("/jobs", get(destinations::list_jobs))
        .route("/reconciliation", get(reconciliation::last_runs))
        .route("/jobs/replay", post(destinations::replay_dead))
        .route("/jobs/{id}", get(destinations::show_job))
        .route("/jobs/{id}/replay", post(destinations::replay_job))
        .layer(middleware::from_fn_with_state(state, authorize))
}

/// Lets a request through only with the configured bearer token.
async fn authorize(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let token = state.admin_token.as_ref().ok_or(ApiError::NotFound)?;
    let (parts, body) = request.into_parts();
    token.check_guarded(&state, "admin", &parts)?;
    Ok(next.run(Request::from_parts(parts, body)).await)
}
