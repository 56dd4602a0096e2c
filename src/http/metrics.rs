//! `GET /metrics`: the Prometheus text exposition.

use axum::extract::State;
use axum::http::header;
use axum::http::request::Parts;
use axum::response::IntoResponse;

use super::AppState;
use super::error::ApiError;

/// The metrics, behind `METRICS_TOKEN` when one is configured.
pub async fn metrics(State(state): State<AppState>, request: Parts) -> Result<impl IntoResponse, ApiError> {
    if let Some(token) = &state.metrics_token {
        token.check_guarded(&state, "metrics", &request)?;
    }
    let body = state.metrics.render(&state.pool).await;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body))
}
