//! Jobs: one row per event and destination in `destination_jobs`, a queue
//! table of the engine (`crate::queue::sql`), inserted in the transaction
//! that records the event for the first time.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tracing::instrument;
use uuid::Uuid;

use super::declaration::{Declaration, Ordering};
use super::entity::entity;
use crate::event::Event;

/// A job to insert: one event going to one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob<'a> {
    /// The destination's name.
    pub destination: &'a str,
    /// The event's provider.
    pub provider: &'a str,
    /// The event's id.
    pub event_id: &'a str,
    /// The event's type.
    pub event_type: &'a str,
    /// When the provider says it happened.
    pub occurred_at: Option<DateTime<Utc>>,
    /// The raw body, byte for byte as the provider sent it.
    pub body: &'a [u8],
    /// The entity it is about, for a destination that orders by entity.
    pub ordering_key: Option<String>,
}

impl Declaration {
    /// The jobs of `event` from `provider` whose raw body is `body`: one per
    /// destination that wants it. Empty without destinations, at the cost
    /// of a check of an empty list.
    pub fn jobs_for<'a>(&'a self, provider: &'a str, event: &'a Event, body: &'a [u8]) -> Vec<NewJob<'a>> {
        let mut entity_of_event = None;
        self.iter()
            .filter(|destination| destination.wants(provider, &event.event_type))
            .map(|destination| NewJob {
                destination: &destination.name,
                provider,
                event_id: &event.id,
                event_type: &event.event_type,
                occurred_at: event.occurred_at,
                body,
                // Read from the payload only when a destination asks for it.
                ordering_key: match destination.ordering {
                    Ordering::None => None,
                    Ordering::Entity => entity_of_event
                        .get_or_insert_with(|| entity(provider, &event.event_type, event.data.as_deref()))
                        .clone(),
                },
            })
            .collect()
    }
}

/// Inserts `jobs` on `conn`, inside the caller's transaction, in one
/// statement. An event already holding a job for a destination keeps that
/// one (a replay reuses its job; this is belt and braces under the dedup
/// table, which never lets an event be recorded twice).
#[instrument(skip_all, fields(jobs = jobs.len()))]
pub async fn enqueue(conn: &mut PgConnection, jobs: &[NewJob<'_>]) -> sqlx::Result<u64> {
    if jobs.is_empty() {
        return Ok(0);
    }
    let inserted = sqlx::query(
        "INSERT INTO destination_jobs (destination, provider, event_id, event_type, occurred_at, body, ordering_key)
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::bytea[], $7::text[])
         ON CONFLICT ON CONSTRAINT uq_destination_jobs_event DO NOTHING",
    )
    .bind(jobs.iter().map(|j| j.destination).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.provider).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.event_id).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.event_type).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.occurred_at).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.body).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.ordering_key.as_deref()).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(inserted.rows_affected())
}

/// A claimed job, with what its request needs.
#[derive(Debug, sqlx::FromRow)]
pub struct Claimed {
    /// The job.
    pub id: i64,
    /// Proves the claim is still ours when recording.
    pub claim_token: Uuid,
    /// Attempts ever made, this one included: the attempt's number.
    pub attempts: i32,
    /// Attempts made before the last replay: the schedule counts from here.
    pub schedule_from: i32,
    /// The event's provider.
    pub provider: String,
    /// The event's id.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// When the provider says it happened.
    pub occurred_at: Option<DateTime<Utc>>,
    /// The raw body.
    #[sqlx(try_from = "Vec<u8>")]
    pub body: Bytes,
}

impl crate::queue::Job for Claimed {
    type Id = i64;

    fn id(&self) -> i64 {
        self.id
    }

    fn claim_token(&self) -> Uuid {
        self.claim_token
    }

    fn attempt(&self) -> u32 {
        u32::try_from(self.attempts - self.schedule_from).unwrap_or(1)
    }
}
