//! The audit of operators' actions: who did what to which event, and what
//! came of it. Written in the same request as the action; shown on the
//! event's console page.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::PgPool;
use tracing::instrument;

use super::reprocess::Reprocessed;

/// One recorded action.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct AuditEntry {
    /// When.
    pub at: DateTime<Utc>,
    /// Who, e.g. `console session <id>`.
    pub actor: String,
    /// What, e.g. `reprocess`.
    pub action: String,
    /// The archive row acted on.
    pub archive_id: i64,
    /// What came of it.
    pub outcome: Value,
}

/// Records that `actor` did `action` (`reprocess`, `bulk reprocess`) with result `reprocessed`.
#[instrument(skip_all)]
pub async fn record_reprocess(
    pool: &PgPool,
    actor: &str,
    action: &str,
    reprocessed: &Reprocessed,
) -> sqlx::Result<()> {
    let outcome = json!({
        "archive_id": reprocessed.archive_id,
        "status": reprocessed.status,
        "error": reprocessed.error,
    });
    sqlx::query(
        "INSERT INTO console_audit (actor, action, provider, event_id, archive_id, outcome)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(actor)
    .bind(action)
    .bind(&reprocessed.provider)
    .bind(&reprocessed.event_id)
    .bind(reprocessed.reprocess_of)
    .bind(outcome)
    .execute(pool)
    .await?;
    Ok(())
}

/// Every action on event (`provider`, `event_id`), oldest first.
#[instrument(skip_all)]
pub async fn of_event(pool: &PgPool, provider: &str, event_id: &str) -> sqlx::Result<Vec<AuditEntry>> {
    sqlx::query_as(
        "SELECT at, actor, action, archive_id, outcome FROM console_audit
         WHERE provider = $1 AND event_id = $2 ORDER BY id",
    )
    .bind(provider)
    .bind(event_id)
    .fetch_all(pool)
    .await
}
