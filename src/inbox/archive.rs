//! The statements that write the archive and the dedup table.

use sqlx::PgExecutor;
use tracing::instrument;

use super::Delivery;

/// Inserts the dedup row and the archive row in one statement, and says
/// whether this delivery is the event's first (`true`) or a duplicate.
///
/// Why one statement: `ON CONFLICT DO NOTHING` on the unique constraint is
/// the arbiter. A concurrent delivery of the same event waits here on the
/// first one's uncommitted row (bounded by `lock_timeout`), then either sees
/// it committed (duplicate) or rolled back (and inserts its own). The archive
/// row gets its final status in the same statement; since it commits with
/// the transaction, no reader ever sees it before the outcome is known.
#[instrument(skip_all)]
pub async fn record<'e>(executor: impl PgExecutor<'e>, delivery: &Delivery<'_>) -> sqlx::Result<(i64, bool)> {
    sqlx::query_as(
        "WITH dedup AS (
             INSERT INTO processed_webhook_events (provider, event_id, event_type)
             VALUES ($1, $2, $3)
             ON CONFLICT ON CONSTRAINT uq_processed_webhook_events_provider_event_id DO NOTHING
             RETURNING id
         )
         INSERT INTO webhook_events
             (provider, event_id, event_type, payload, signature, secret_index,
              notification_id, request_id, occurred_at, reprocess_of, processing_status, processed_at)
         SELECT $1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10,
                CASE WHEN EXISTS (SELECT FROM dedup) THEN 'PROCESSED' ELSE 'SKIPPED' END,
                now()
         RETURNING id, processing_status = 'PROCESSED'",
    )
    .bind(delivery.provider)
    .bind(delivery.event.id.as_ref())
    .bind(delivery.event.event_type.as_ref())
    .bind(delivery.payload)
    .bind(delivery.signature)
    .bind(delivery.secret_index.map(|i| i as i16))
    .bind(delivery.event.notification_id.as_deref())
    .bind(delivery.request_id)
    .bind(delivery.event.occurred_at)
    .bind(delivery.reprocess_of)
    .fetch_one(executor)
    .await
}

/// Archives a delivery whose handler failed, with the error, after the
/// savepoint rollback removed its dedup row and effects.
#[instrument(skip_all)]
pub async fn record_failure<'e>(
    executor: impl PgExecutor<'e>,
    delivery: &Delivery<'_>,
    error: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO webhook_events
             (provider, event_id, event_type, payload, signature, secret_index,
              notification_id, request_id, occurred_at, reprocess_of, processing_status, error_message)
         VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10, 'FAILED', $11)
         RETURNING id",
    )
    .bind(delivery.provider)
    .bind(delivery.event.id.as_ref())
    .bind(delivery.event.event_type.as_ref())
    .bind(delivery.payload)
    .bind(delivery.signature)
    .bind(delivery.secret_index.map(|i| i as i16))
    .bind(delivery.event.notification_id.as_deref())
    .bind(delivery.request_id)
    .bind(delivery.event.occurred_at)
    .bind(delivery.reprocess_of)
    .bind(error)
    .fetch_one(executor)
    .await
}
