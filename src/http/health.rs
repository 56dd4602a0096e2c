//! Liveness and readiness probes.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;

/// How long readiness waits for the database before saying no.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /healthz`: the process is up and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: the database answers; 503 otherwise.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let ping = sqlx::query("SELECT 1").execute(&state.pool);
    match tokio::time::timeout(READY_TIMEOUT, ping).await {
        Ok(Ok(_)) => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        _ => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "error": "database unavailable" }))),
    }
}
