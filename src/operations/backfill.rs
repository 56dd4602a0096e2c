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
use sqlx::PgPool;
use tracing::instrument;

use super::age::Since;
use crate::destinations::jobs::OrderingKeys;
use crate::destinations::{Declaration, state};
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
    let providers: Vec<&str> = destination.events.iter().map(|pattern| pattern.provider()).collect();
    let mut after = (since, 0_i64);
    let mut enqueued = 0;
    loop {
        // Events that already have a job of this destination are left out:
        // read through the jobs' unique index, event first.
        let page: Vec<Applied> = sqlx::query_as(
            "SELECT id, created_at, provider, event_id, event_type, payload::text AS payload
             FROM webhook_events AS w
             WHERE processing_status = 'PROCESSED' AND provider = ANY($1)
               AND created_at >= $2 AND created_at < $3 AND (created_at, id) > ($2, $4)
               AND NOT EXISTS (SELECT FROM destination_jobs AS j
                               WHERE j.event_id = w.event_id AND j.provider = w.provider
                                 AND j.destination = $5)
             ORDER BY created_at, id
             LIMIT $6",
        )
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
        let jobs = Jobs::of(&page, destination);
        enqueued += if dry_run { jobs.event_ids.len() as u64 } else { jobs.insert(pool, name).await? };
        if (page.len() as i64) < PAGE {
            break;
        }
    }
    Ok(Backfilled { destination: name.to_string(), enqueued, dry_run })
}

/// A page's jobs, column by column (bound as arrays).
#[derive(Default)]
struct Jobs {
    ordering_keys: Vec<Option<String>>,
    bodies: Vec<Vec<u8>>,
    providers: Vec<String>,
    event_ids: Vec<String>,
    event_types: Vec<String>,
    occurred_at: Vec<Option<DateTime<Utc>>>,
}

impl Jobs {
    /// The jobs of the events in `page` that `destination` wants, in order.
    /// A payload that no longer reads as an event of its provider (which an
    /// applied one does) is skipped, and logged without its content.
    fn of(page: &[Applied], destination: &crate::destinations::Destination) -> Jobs {
        let mut jobs = Jobs::default();
        for applied in page.iter().filter(|a| destination.wants(&a.provider, &a.event_type)) {
            let format = providers::format_of(&applied.provider);
            let read = Payload::try_from(applied.payload.clone())
                .and_then(|payload| format.read_stored(&applied.event_id, &applied.event_type, &payload));
            let event = match read {
                Ok(event) => event,
                Err(_) => {
                    tracing::warn!(
                        archive_id = applied.id,
                        "backfill skips a payload that is not a valid event"
                    );
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

    /// Inserts them for destination `name`; returns how many were new.
    async fn insert(self, pool: &PgPool, name: &str) -> sqlx::Result<u64> {
        let inserted = sqlx::query(
            "INSERT INTO destination_jobs
                 (destination, ordering_key, body, provider, event_id, event_type, occurred_at, backfill)
             SELECT $1, j.ordering_key, j.body, j.provider, j.event_id, j.event_type, j.occurred_at, true
             FROM unnest($2::text[], $3::bytea[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
                  WITH ORDINALITY AS j (ordering_key, body, provider, event_id, event_type, occurred_at, n)
             ORDER BY j.n
             ON CONFLICT ON CONSTRAINT uq_destination_jobs_event DO NOTHING",
        )
        .bind(name)
        .bind(self.ordering_keys)
        .bind(self.bodies)
        .bind(self.providers)
        .bind(self.event_ids)
        .bind(self.event_types)
        .bind(self.occurred_at)
        .execute(pool)
        .await?;
        Ok(inserted.rows_affected())
    }
}
