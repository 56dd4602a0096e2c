//! The statements that write the archive and the dedup table.

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgConnection, PgExecutor, Postgres, Row};
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
    let query = sqlx::query(
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
    );
    let row = bind_delivery(query, delivery).fetch_one(executor).await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// Records several deliveries of events without side effects as
/// [`record`] does each, in one statement: one round trip and one commit for
/// all of them. Says, in input order, whether each was its event's first.
/// No two deliveries may share a `(provider, event_id)`.
///
/// Why the dedup rows go in key order: two batches holding some of the same
/// events then always take their row locks in the same order, so they wait
/// for each other but never deadlock.
#[instrument(skip_all, fields(deliveries = deliveries.len()))]
pub async fn record_many(
    conn: &mut PgConnection,
    deliveries: &[&Delivery<'_>],
) -> sqlx::Result<Vec<(i64, bool)>> {
    let rows: Vec<(i64, String, String, bool)> = sqlx::query_as(
        "WITH input AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int2[],
                                  $7::text[], $8::text[], $9::timestamptz[], $10::int8[])
                 AS t(provider, event_id, event_type, payload, signature, secret_index,
                      notification_id, request_id, occurred_at, reprocess_of)
         ),
         dedup AS (
             INSERT INTO processed_webhook_events (provider, event_id, event_type)
             SELECT provider, event_id, event_type FROM input ORDER BY provider, event_id
             ON CONFLICT ON CONSTRAINT uq_processed_webhook_events_provider_event_id DO NOTHING
             RETURNING provider, event_id
         )
         INSERT INTO webhook_events
             (provider, event_id, event_type, payload, signature, secret_index,
              notification_id, request_id, occurred_at, reprocess_of, processing_status, processed_at)
         SELECT i.provider, i.event_id, i.event_type, i.payload::jsonb, i.signature, i.secret_index,
                i.notification_id, i.request_id, i.occurred_at, i.reprocess_of,
                CASE WHEN d.event_id IS NULL THEN 'SKIPPED' ELSE 'PROCESSED' END,
                now()
         FROM input i LEFT JOIN dedup d ON d.provider = i.provider AND d.event_id = i.event_id
         RETURNING id, provider, event_id, processing_status = 'PROCESSED'",
    )
    .bind(deliveries.iter().map(|d| d.provider).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.event.id.as_ref()).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.event.event_type.as_ref()).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.payload).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.signature).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.secret_index.map(|i| i as i16)).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.event.notification_id.as_deref()).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.request_id).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.event.occurred_at).collect::<Vec<_>>())
    .bind(deliveries.iter().map(|d| d.reprocess_of).collect::<Vec<_>>())
    .fetch_all(conn)
    .await?;
    // RETURNING has no order: match the rows back by their (unique) key.
    deliveries
        .iter()
        .map(|d| {
            rows.iter()
                .find(|(_, provider, event_id, _)| provider == d.provider && *event_id == d.event.id)
                .map(|(id, _, _, first)| (*id, *first))
                .ok_or_else(|| sqlx::Error::Protocol("a batched delivery was not recorded".into()))
        })
        .collect()
}

/// Archives a delivery whose handler failed, with the error, after the
/// savepoint rollback removed its dedup row and effects.
#[instrument(skip_all)]
pub async fn record_failure<'e>(
    executor: impl PgExecutor<'e>,
    delivery: &Delivery<'_>,
    error: &str,
) -> sqlx::Result<i64> {
    let query = sqlx::query(
        "INSERT INTO webhook_events
             (provider, event_id, event_type, payload, signature, secret_index,
              notification_id, request_id, occurred_at, reprocess_of, processing_status, error_message)
         VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10, 'FAILED', $11)
         RETURNING id",
    );
    bind_delivery(query, delivery).bind(error).fetch_one(executor).await?.try_get(0)
}

/// Binds what the archive records of a delivery, as `$1` to `$10` in the
/// order of the archive's columns.
fn bind_delivery<'q>(
    query: Query<'q, Postgres, PgArguments>,
    delivery: &'q Delivery<'_>,
) -> Query<'q, Postgres, PgArguments> {
    query
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
}
