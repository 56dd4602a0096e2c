//! The state of the intake at a glance: per provider, what arrived in the
//! last hour and day and when the last delivery came; the failures still
//! waiting for someone; deliveries per minute over the day; the outbox.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, PgPool};
use tracing::instrument;

/// The window of the per-minute series and of the day's counts.
pub const MINUTES: usize = 24 * 60;

/// Most unapplied FAILED events counted.
pub const UNAPPLIED_COUNTED: i64 = 100;

/// Archive rows by outcome (`processing_status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// First deliveries of their event: applied.
    pub processed: i64,
    /// Later deliveries of an applied event: answered idempotently.
    pub skipped: i64,
    /// The effect failed: nothing applied.
    pub failed: i64,
}

impl Counts {
    fn add(&mut self, status: &str, count: i64) {
        match status {
            "PROCESSED" => self.processed += count,
            "SKIPPED" => self.skipped += count,
            "FAILED" => self.failed += count,
            _ => {}
        }
    }
}

/// One provider's deliveries.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderActivity {
    /// The provider's name.
    pub provider: String,
    /// Archived in the last hour.
    pub last_hour: Counts,
    /// Archived in the last 24 hours.
    pub last_day: Counts,
    /// When its last verified delivery (a webhook, not an API read or an
    /// operator's reprocess) was archived. `None`: none is in the archive.
    pub last_delivery_at: Option<DateTime<Utc>>,
}

/// Everything the overview shows from the database.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    /// The database's clock when it was read.
    pub now: DateTime<Utc>,
    /// One entry per provider asked for, in that order.
    pub providers: Vec<ProviderActivity>,
    /// Events with a FAILED row and no dedup row: failed and not applied
    /// since; at most [`UNAPPLIED_COUNTED`].
    pub unapplied_failed: i64,
    /// Whether there are more than [`UNAPPLIED_COUNTED`] of them.
    pub more_unapplied_failed: bool,
    /// When the oldest of their FAILED rows was archived.
    pub oldest_unapplied_failed_at: Option<DateTime<Utc>>,
    /// Every provider's rows per minute, oldest minute first: [`MINUTES`] entries,
    /// the last one the minute in progress.
    pub per_minute: Vec<Counts>,
    /// Emails waiting to be sent or retried.
    pub outbox_pending: i64,
    /// Emails given up.
    pub outbox_dead: i64,
}

/// Reads the overview of `providers`.
///
/// Each part reads an index only: the day's rows of each provider through
/// `ix_webhook_events_provider_created_at` (which carries the status), its
/// last delivery from the end of the same index, the FAILED events through
/// their partial indexes (`ix_webhook_events_failed_event` for the count,
/// `ix_webhook_events_failed_created_at` for the oldest), the outbox through
/// its partial indexes. The cost grows with the last day's deliveries, not
/// with the archive.
#[instrument(skip_all)]
pub async fn overview(pool: &PgPool, providers: &[String]) -> sqlx::Result<Overview> {
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(pool).await?;
    // Whole clock minutes, the last one in progress: a day of them.
    let this_minute = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
    // Independent reads, each on its own pooled connection: the page waits
    // for the slowest, not for their sum.
    let (day, last_deliveries, (unapplied_failed, oldest_unapplied_failed_at), (outbox_pending, outbox_dead)) =
        tokio::try_join!(
            day(pool, providers, this_minute - TimeDelta::minutes(MINUTES as i64 - 1), now),
            last_deliveries(pool, providers),
            unapplied_failures(pool),
            outbox(pool),
        )?;
    let mut activity: Vec<ProviderActivity> = providers
        .iter()
        .zip(last_deliveries)
        .map(|(provider, last_delivery_at)| ProviderActivity {
            provider: provider.clone(),
            last_hour: Counts::default(),
            last_day: Counts::default(),
            last_delivery_at,
        })
        .collect();
    let mut per_minute = vec![Counts::default(); MINUTES];
    for (provider, status, minute, count) in day {
        let Some(entry) = activity.iter_mut().find(|a| a.provider == provider) else { continue };
        let minutes_ago = ((this_minute - minute).num_minutes().max(0) as usize).min(MINUTES - 1);
        entry.last_day.add(&status, count);
        if minutes_ago < 60 {
            entry.last_hour.add(&status, count);
        }
        per_minute[MINUTES - 1 - minutes_ago].add(&status, count);
    }
    Ok(Overview {
        now,
        providers: activity,
        unapplied_failed: unapplied_failed.min(UNAPPLIED_COUNTED),
        more_unapplied_failed: unapplied_failed > UNAPPLIED_COUNTED,
        oldest_unapplied_failed_at,
        per_minute,
        outbox_pending,
        outbox_dead,
    })
}

/// Rows archived from `from` to `to`, by provider, status and minute.
async fn day(
    pool: &PgPool,
    providers: &[String],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<Vec<(String, String, DateTime<Utc>, i64)>> {
    sqlx::query_as(
        "SELECT provider, processing_status, date_trunc('minute', created_at), count(*)
         FROM webhook_events
         WHERE provider = ANY($1) AND created_at >= $2 AND created_at <= $3
         GROUP BY 1, 2, 3",
    )
    .bind(providers)
    .bind(from)
    .bind(to)
    .fetch_all(pool)
    .await
}

/// When each provider's last verified delivery was archived.
async fn last_deliveries(pool: &PgPool, providers: &[String]) -> sqlx::Result<Vec<Option<DateTime<Utc>>>> {
    let mut last = Vec::with_capacity(providers.len());
    for provider in providers {
        last.push(last_verified_delivery(pool, provider).await?);
    }
    Ok(last)
}

/// When `provider`'s last verified delivery was archived: a webhook's row,
/// not one an API read (reconciliation) or an operator's reprocess wrote,
/// since only a webhook shows the provider can reach the service.
pub async fn last_verified_delivery<'e>(
    executor: impl PgExecutor<'e>,
    provider: &str,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar(
        "SELECT created_at FROM webhook_events
         WHERE provider = $1 AND source = 'webhook' ORDER BY created_at DESC LIMIT 1",
    )
    .bind(provider)
    .fetch_optional(executor)
    .await
}

/// FAILED events not applied since, counted up to one more than
/// [`UNAPPLIED_COUNTED`] (each is checked against the dedup table, and past
/// that the number only says "many"), and when the oldest was archived.
async fn unapplied_failures(pool: &PgPool) -> sqlx::Result<(i64, Option<DateTime<Utc>>)> {
    let count = sqlx::query_scalar(
        "SELECT count(*) FROM (
             SELECT DISTINCT w.provider, w.event_id FROM webhook_events w
             WHERE w.processing_status = 'FAILED'
               AND NOT EXISTS (SELECT FROM processed_webhook_events p
                               WHERE p.provider = w.provider AND p.event_id = w.event_id)
             LIMIT $1) unapplied",
    )
    .bind(UNAPPLIED_COUNTED + 1)
    .fetch_one(pool)
    .await?;
    // The oldest first: the walk stops at the first one not applied since.
    let oldest = sqlx::query_scalar(
        "SELECT w.created_at FROM webhook_events w
         WHERE w.processing_status = 'FAILED'
           AND NOT EXISTS (SELECT FROM processed_webhook_events p
                           WHERE p.provider = w.provider AND p.event_id = w.event_id)
         ORDER BY w.created_at LIMIT 1",
    )
    .fetch_optional(pool)
    .await?;
    Ok((count, oldest))
}

/// Emails pending and dead.
async fn outbox(pool: &PgPool) -> sqlx::Result<(i64, i64)> {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM outbox WHERE status = 'pending'),
                (SELECT count(*) FROM outbox WHERE status = 'dead')",
    )
    .fetch_one(pool)
    .await
}
