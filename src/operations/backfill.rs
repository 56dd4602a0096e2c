//! Backfill: a destination added after months of running gets the events it
//! would have had. Every applied event of a time range that its patterns
//! match becomes a job, oldest first, with the ordering key a live job
//! would have (`OrderingKeys`), marked `backfill` so that claims take live
//! jobs first (DESIGN.md, "Backfill").
//!
//! At most one job per event and destination, ever: events that already
//! have one are not read, and the insert's `ON CONFLICT DO NOTHING` on the
//! jobs' unique constraint settles a race with live traffic or with another
//! backfill. The body is the archive's payload (normalised JSON, as after a
//! reprocess): the raw body is kept only by jobs.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{AssertSqlSafe, PgPool};
use tracing::instrument;

use super::age::Since;
use crate::destinations::Declaration;
use crate::destinations::jobs::OrderingKeys;
use crate::destinations::store::jobs::{BackfillJobs, without_job};
use crate::destinations::store::state;
use crate::event::Payload;
use crate::providers;

/// Archived events read, and jobs written, per statement: large enough to
/// keep a backfill of 100,000 events to a hundred round trips, small
/// enough to hold no lock for long.
const PAGE: i64 = 1000;

/// Which events to backfill: those first received in `[since, until)`.
#[derive(Debug, Clone, Copy)]
pub struct BackfillRange {
    /// From then on: a duration back from now (`30d`) or an RFC 3339 time.
    pub since: Since,
    /// Before then (default: now).
    pub until: Option<Since>,
}

/// What a backfill did, or (dry run) would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Backfilled {
    /// The destination.
    pub destination: String,
    /// Jobs enqueued; in a dry run, the jobs a run would enqueue now.
    pub enqueued: u64,
    /// Whether nothing was written.
    pub dry_run: bool,
}

/// Why a backfill did nothing.
#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    /// No declared destination has this name.
    #[error("destination {0:?} is not declared")]
    NotFound(String),
    /// `until` is not after `since`.
    #[error("until must be after since")]
    EmptyRange,
    /// The database.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// An applied event of the archive, as a job is written from it.
#[derive(sqlx::FromRow)]
struct Applied {
    id: i64,
    created_at: DateTime<Utc>,
    provider: String,
    event_id: String,
    event_type: String,
    payload: String,
}

/// Backfills destination `name` with the applied events of `range` it
/// wants (see the module's doc); `dry_run` counts and writes nothing.
#[instrument(skip(pool, declaration))]
pub async fn backfill(
    pool: &PgPool,
    declaration: &Declaration,
    name: &str,
    range: BackfillRange,
    dry_run: bool,
) -> Result<Backfilled, BackfillError> {
    let destination = declaration.get(name).ok_or_else(|| BackfillError::NotFound(name.into()))?;
    let Since(since) = range.since;
    let until = range.until.map_or_else(Utc::now, |Since(until)| until);
    if until <= since {
        return Err(BackfillError::EmptyRange);
    }
    // Its queue's row, for a destination declared but never served yet.
    state::declare(pool, declaration).await?;
    analyze_changed_partitions(pool).await?;
    let providers: Vec<&str> = destination.events.iter().map(|pattern| pattern.provider()).collect();
    let mut after = (since, 0_i64);
    let mut enqueued = 0;
    loop {
        // Events that already have a job of this destination are left out.
        let page: Vec<Applied> = sqlx::query_as(concat!(
            "SELECT id, created_at, provider, event_id, event_type, payload::text AS payload
             FROM webhook_events AS w
             WHERE processing_status = 'PROCESSED' AND provider = ANY($1)
               AND created_at >= $2 AND created_at < $3 AND (created_at, id) > ($2, $4)
               AND ",
            without_job!(),
            "
             ORDER BY created_at, id
             LIMIT $6"
        ))
        .bind(&providers)
        .bind(after.0)
        .bind(until)
        .bind(after.1)
        .bind(name)
        .bind(PAGE)
        .fetch_all(pool)
        .await?;
        let Some(last) = page.last() else { break };
        after = (last.created_at, last.id);
        let jobs = jobs_of(&page, destination);
        enqueued += if dry_run { jobs.event_ids.len() as u64 } else { jobs.insert(pool, name).await? };
        if (page.len() as i64) < PAGE {
            break;
        }
    }
    Ok(Backfilled { destination: name.to_string(), enqueued, dry_run })
}

/// Brings the statistics of the archive's partitions that changed much
/// since they were last analyzed up to date.
///
/// Why: each page is read in `(created_at, id)` order under a `LIMIT`,
/// cheap only while PostgreSQL knows how many rows a day's partition holds.
/// Today's, filled since autovacuum last looked at it, can claim to be
/// empty; the planner then reads and sorts the whole rest of the range for
/// every page (seen by `loadgen backfill`: 74 s to enqueue 100,000 events
/// that took 13 s once the partition was analyzed). ANALYZE samples a
/// bounded number of rows, so a few partitions cost well under a second
/// each.
async fn analyze_changed_partitions(pool: &PgPool) -> sqlx::Result<()> {
    let changed: Vec<String> = sqlx::query_scalar(
        "SELECT format('%I.%I', s.schemaname, s.relname)
         FROM pg_partition_tree('webhook_events') AS t
         JOIN pg_stat_user_tables AS s ON s.relid = t.relid
         WHERE t.isleaf AND s.n_mod_since_analyze > 0.1 * greatest(s.n_live_tup, 1000)",
    )
    .fetch_all(pool)
    .await?;
    for partition in changed {
        sqlx::raw_sql(AssertSqlSafe(format!("ANALYZE {partition}"))).execute(pool).await?;
    }
    Ok(())
}

/// The jobs of the events in `page` that `destination` wants, in order.
/// A payload that no longer reads as an event of its provider (which an
/// applied one does) is skipped, and logged without its content.
fn jobs_of(page: &[Applied], destination: &crate::destinations::Destination) -> BackfillJobs {
    let mut jobs = BackfillJobs::default();
    for applied in page.iter().filter(|a| destination.wants(&a.provider, &a.event_type)) {
        let format = providers::format_of(&applied.provider);
        let read = Payload::try_from(applied.payload.clone())
            .and_then(|payload| format.read_stored(&applied.event_id, &applied.event_type, &payload));
        let event = match read {
            Ok(event) => event,
            Err(_) => {
                tracing::warn!(archive_id = applied.id, "backfill skips a payload that is not a valid event");
                continue;
            }
        };
        jobs.ordering_keys.push(OrderingKeys::new(&applied.provider, &event).of(destination));
        jobs.bodies.push(applied.payload.clone().into_bytes());
        jobs.providers.push(applied.provider.clone());
        jobs.event_ids.push(applied.event_id.clone());
        jobs.event_types.push(applied.event_type.clone());
        jobs.occurred_at.push(event.occurred_at);
    }
    jobs
}
