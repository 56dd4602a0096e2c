//! The audit of operators' actions: who did what to which event, job or
//! destination, and what came of it. Written in the same request as the
//! action; shown on the event's console page (its reprocesses and its jobs'
//! replays) and on the overview (the destinations').

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::PgPool;
use tracing::instrument;

use super::jobs::JobSummary;
use super::reprocess::Reprocessed;

/// One recorded action.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct AuditEntry {
    /// When.
    pub at: DateTime<Utc>,
    /// Who, e.g. `console session <id>`.
    pub actor: String,
    /// What, e.g. `reprocess`, `pause`, `replay`.
    pub action: String,
    /// The archive row acted on, for a reprocess.
    pub archive_id: Option<i64>,
    /// The destination acted on, or whose job was.
    pub destination: Option<String>,
    /// The forwarding job acted on, for a replay.
    pub job_id: Option<i64>,
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

/// Records that `actor` did `action` (`pause`, `resume`) to destination
/// `destination`, with result `outcome`.
#[instrument(skip_all)]
pub async fn record_destination(
    pool: &PgPool,
    actor: &str,
    action: &str,
    destination: &str,
    outcome: Value,
) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO console_audit (actor, action, destination, outcome) VALUES ($1, $2, $3, $4)")
        .bind(actor)
        .bind(action)
        .bind(destination)
        .bind(outcome)
        .execute(pool)
        .await?;
    Ok(())
}

/// Records that `actor` did `action` (`replay`, `replay dead`) to each of
/// `jobs`, as they are now: one row per job, in one statement.
#[instrument(skip_all, fields(jobs = jobs.len()))]
pub async fn record_jobs(pool: &PgPool, actor: &str, action: &str, jobs: &[JobSummary]) -> sqlx::Result<()> {
    let rows: Vec<Value> = jobs.iter().map(|job| json!(job)).collect();
    sqlx::query(
        "INSERT INTO console_audit (actor, action, provider, event_id, destination, job_id, outcome)
         SELECT $1, $2, j->>'provider', j->>'event_id', j->>'destination', (j->>'id')::bigint,
                jsonb_build_object('status', j->'status', 'attempts', j->'attempts')
         FROM unnest($3::jsonb[]) AS j",
    )
    .bind(actor)
    .bind(action)
    .bind(rows)
    .execute(pool)
    .await?;
    Ok(())
}

/// The columns of [`AuditEntry`].
macro_rules! entry_columns {
    () => {
        "at, actor, action, archive_id, destination, job_id, outcome"
    };
}

/// Every action on event (`provider`, `event_id`) or its jobs, oldest first.
#[instrument(skip_all)]
pub async fn of_event(pool: &PgPool, provider: &str, event_id: &str) -> sqlx::Result<Vec<AuditEntry>> {
    sqlx::query_as(concat!(
        "SELECT ",
        entry_columns!(),
        " FROM console_audit WHERE provider = $1 AND event_id = $2 ORDER BY id"
    ))
    .bind(provider)
    .bind(event_id)
    .fetch_all(pool)
    .await
}

/// The latest `limit` actions on destinations and their jobs, newest first.
#[instrument(skip_all)]
pub async fn of_destinations(pool: &PgPool, limit: u32) -> sqlx::Result<Vec<AuditEntry>> {
    sqlx::query_as(concat!(
        "SELECT ",
        entry_columns!(),
        " FROM console_audit WHERE destination IS NOT NULL ORDER BY id DESC LIMIT $1"
    ))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
}
