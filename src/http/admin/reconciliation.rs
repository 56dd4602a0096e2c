//! `/admin/reconciliation`: each provider's last reconciliation run (from
//! `reconcile` or `serve`) and where its next one starts.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::http::error::ApiError;
use crate::http::{AppState, NoQuery};
use crate::reconcile::state;

/// `GET /admin/reconciliation`: `{"reconciliation": [...]}`, by provider.
pub async fn last_runs(State(app): State<AppState>, _: NoQuery) -> Result<Json<Value>, ApiError> {
    let runs = state::last_runs(&app.pool).await?;
    Ok(Json(json!({ "reconciliation": runs })))
}
