//! Reading the archive: pages of rows, one row with everything, and the
//! other deliveries of its event.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgExecutor, PgPool, Postgres, QueryBuilder};
use tracing::instrument;

use super::filter::EventFilter;

/// An archive row's place in the listing: the archive is listed by when
/// each row was received, then by id, so that a page of the newest rows, or
/// of a time range, reads only the day partitions it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// When the row was archived.
    pub created_at: DateTime<Utc>,
    /// Its id, which orders rows received at the same instant.
    pub id: i64,
}

/// The columns of [`ArchivedDelivery`], for every query that reads one.
const SUMMARY_COLUMNS: &str = "id, provider, event_id, event_type, processing_status, error_message, \
                               occurred_at, created_at, processed_at, reprocess_of";

/// One archive row without its payload and signature: a line of a listing.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ArchivedDelivery {
    /// The archive id, which `show` and `reprocess` take.
    pub id: i64,
    /// The provider that sent it.
    pub provider: String,
    /// The provider's event id.
    pub event_id: String,
    /// The provider's event type.
    pub event_type: String,
    /// PROCESSED, SKIPPED or FAILED.
    pub processing_status: String,
    /// Why the effect failed (FAILED rows).
    pub error_message: Option<String>,
    /// When the provider says the event happened.
    pub occurred_at: Option<DateTime<Utc>>,
    /// When the delivery was archived.
    pub created_at: DateTime<Utc>,
    /// When it was recorded processed or skipped.
    pub processed_at: Option<DateTime<Utc>>,
    /// The row this one reprocessed, if an operator reprocessed it.
    pub reprocess_of: Option<i64>,
}

/// Every column of an archive row, and whether its event has been applied.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ArchivedDeliveryDetail {
    /// The columns a listing shows.
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub summary: ArchivedDelivery,
    /// The body as stored (`jsonb`: key order and whitespace normalized).
    pub payload: Value,
    /// Where the delivery came from: `webhook`, `api` or `reprocess`.
    pub source: String,
    /// The signature header as received (none for an event read from an API).
    pub signature: Option<String>,
    /// Which configured secret verified it (0-based).
    pub secret_index: Option<i16>,
    /// Paddle's per-attempt notification id.
    pub notification_id: Option<String>,
    /// The request id it arrived with (or of the reprocess that wrote it).
    pub request_id: Option<String>,
    /// When the event's dedup row was written: its effects are committed.
    /// `None`: the event has not been applied (yet).
    pub event_applied_at: Option<DateTime<Utc>>,
}

/// Rows matching `filter`, newest first (by when they were received, then
/// id), at most `limit`, only those after `after` when given (the previous
/// page's last row).
#[instrument(skip_all)]
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    filter: &EventFilter,
    limit: u32,
    after: Option<Received>,
) -> sqlx::Result<Vec<ArchivedDelivery>> {
    let mut sql =
        QueryBuilder::<Postgres>::new(format!("SELECT {SUMMARY_COLUMNS} FROM webhook_events w WHERE true"));
    filter.push_conditions(&mut sql, "w");
    if let Some(Received { created_at, id }) = after {
        // The first condition is implied by the second, and is what lets
        // PostgreSQL skip the days after the cursor.
        sql.push(" AND w.created_at <= ").push_bind(created_at);
        sql.push(" AND (w.created_at, w.id) < (").push_bind(created_at).push(", ").push_bind(id).push(")");
    }
    sql.push(" ORDER BY w.created_at DESC, w.id DESC LIMIT ").push_bind(i64::from(limit));
    sql.build_query_as().fetch_all(executor).await
}

/// One archive row and the other deliveries of its event: what `show` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Shown {
    /// The row, every column.
    pub event: ArchivedDeliveryDetail,
    /// The event's other deliveries, oldest first.
    pub other_deliveries: Vec<ArchivedDelivery>,
}

/// The archive row `id` with every column, and the other deliveries of its event.
#[instrument(skip_all)]
pub async fn show(pool: &PgPool, id: i64) -> sqlx::Result<Option<Shown>> {
    let Some(event) = detail(pool, id).await? else {
        return Ok(None);
    };
    let other_deliveries = other_deliveries(pool, &event.summary).await?;
    Ok(Some(Shown { event, other_deliveries }))
}

async fn detail<'e>(executor: impl PgExecutor<'e>, id: i64) -> sqlx::Result<Option<ArchivedDeliveryDetail>> {
    sqlx::query_as(
        "SELECT w.id, w.provider, w.event_id, w.event_type, w.processing_status, w.error_message,
                w.occurred_at, w.created_at, w.processed_at, w.reprocess_of,
                w.payload, w.source, w.signature, w.secret_index, w.notification_id, w.request_id,
                p.processed_at AS event_applied_at
         FROM webhook_events w
         LEFT JOIN processed_webhook_events p ON p.provider = w.provider AND p.event_id = w.event_id
         WHERE w.id = $1",
    )
    .bind(id)
    .fetch_optional(executor)
    .await
}

async fn other_deliveries<'e>(
    executor: impl PgExecutor<'e>,
    row: &ArchivedDelivery,
) -> sqlx::Result<Vec<ArchivedDelivery>> {
    let mut sql = QueryBuilder::<Postgres>::new(format!(
        "SELECT {SUMMARY_COLUMNS} FROM webhook_events WHERE provider = "
    ));
    sql.push_bind(row.provider.clone()).push(" AND event_id = ").push_bind(row.event_id.clone());
    sql.push(" AND id <> ").push_bind(row.id).push(" ORDER BY id");
    sql.build_query_as().fetch_all(executor).await
}

/// The events an operator can reprocess among the rows matching `filter`:
/// those not applied since (no dedup row), one row per event, its latest
/// matching one, oldest first, at most `limit`.
///
/// Why not every matching row: a provider retries, so one broken event often
/// has several FAILED rows, and one that a retry or an earlier reprocess has
/// since applied needs nothing. This also makes a bulk reprocess resumable:
/// running it again picks up what is still unapplied.
#[instrument(skip_all)]
pub async fn reprocessable<'e>(
    executor: impl PgExecutor<'e>,
    filter: &EventFilter,
    limit: Option<u32>,
) -> sqlx::Result<Vec<ArchivedDelivery>> {
    let mut sql = QueryBuilder::<Postgres>::new(format!(
        "SELECT {SUMMARY_COLUMNS} FROM (
             SELECT DISTINCT ON (w.provider, w.event_id) w.*
             FROM webhook_events w
             WHERE NOT EXISTS (SELECT FROM processed_webhook_events p
                               WHERE p.provider = w.provider AND p.event_id = w.event_id)"
    ));
    filter.push_conditions(&mut sql, "w");
    sql.push(" ORDER BY w.provider, w.event_id, w.id DESC) latest ORDER BY id");
    if let Some(limit) = limit {
        sql.push(" LIMIT ").push_bind(i64::from(limit));
    }
    sql.build_query_as().fetch_all(executor).await
}
