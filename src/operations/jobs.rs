//! What operators do with forwarding jobs: list them, show one with its
//! attempts, replay one, or every dead job of a destination in a time range.

use clap::Args;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tracing::instrument;

use super::age::Since;
use super::filter::{FilterValue, parsed};
use crate::destinations::signer::message_id;
use crate::destinations::store::jobs::{self as store, JobConditions};
pub use crate::destinations::store::jobs::{JobAttempt, JobSummary};
use crate::queue::Status;

/// Conditions on jobs; every one given must hold.
#[derive(Debug, Clone, Default, Args, Deserialize)]
pub struct JobFilter {
    /// Only jobs of this destination.
    #[arg(long)]
    #[serde(default, deserialize_with = "parsed")]
    pub destination: Option<FilterValue>,

    /// Only jobs with this status: pending, sent, dead.
    #[arg(long)]
    #[serde(default, deserialize_with = "parsed")]
    pub status: Option<Status>,

    /// Only jobs of this event id.
    #[arg(long)]
    #[serde(default, deserialize_with = "parsed")]
    pub event_id: Option<FilterValue>,

    /// Only jobs created since then: a duration back from now (30m, 2h, 1d) or an RFC 3339 time.
    #[arg(long)]
    #[serde(default, deserialize_with = "parsed")]
    pub since: Option<Since>,

    /// Only jobs created before then: a duration back from now or an RFC 3339 time.
    #[arg(long)]
    #[serde(default, deserialize_with = "parsed")]
    pub until: Option<Since>,
}

impl JobFilter {
    fn conditions(&self) -> JobConditions<'_> {
        JobConditions {
            destination: self.destination.as_ref().map(FilterValue::as_str),
            status: self.status,
            event_id: self.event_id.as_ref().map(FilterValue::as_str),
            since: self.since.map(|Since(since)| since),
            until: self.until.map(|Since(until)| until),
        }
    }
}

/// Jobs matching `filter`, newest first, at most `limit`, with an id below
/// `before` when given (the previous page's last id).
#[instrument(skip_all)]
pub async fn list(
    pool: &PgPool,
    filter: &JobFilter,
    limit: u32,
    before: Option<i64>,
) -> sqlx::Result<Vec<JobSummary>> {
    store::list(pool, filter.conditions(), limit, before).await
}

/// A job with everything about it.
#[derive(Debug, Clone, Serialize)]
pub struct JobDetail {
    /// The job.
    #[serde(flatten)]
    pub job: JobSummary,
    /// Its `webhook-id`, the same on every attempt.
    pub webhook_id: String,
    /// The size of the body it sends.
    pub body_bytes: i32,
    /// Every attempt (until purged with the archive's retention), oldest first.
    pub attempts_made: Vec<JobAttempt>,
}

/// Job `id` with its attempts, or `None`.
#[instrument(skip_all, fields(job_id = id))]
pub async fn show(pool: &PgPool, id: i64) -> sqlx::Result<Option<JobDetail>> {
    let Some(store::FoundJob { job, body_bytes }) = store::find(pool, id).await? else { return Ok(None) };
    let attempts_made = store::attempts(pool, id).await?;
    let webhook_id = message_id(&job.destination, &job.provider, &job.event_id);
    Ok(Some(JobDetail { job, webhook_id, body_bytes, attempts_made }))
}

/// Why a job was not replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// No job has this id.
    #[error("job {0} not found")]
    NotFound(i64),
    /// It is pending: it will be sent anyway (a replay would race its send).
    #[error("job {0} is pending: it is sent (or retried) without a replay")]
    Pending(i64),
    /// The database.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Sends a sent or dead job again: pending now, with a fresh retry schedule
/// and the same `webhook-id`; no second job is ever made. Returns the job.
#[instrument(skip_all, fields(job_id = id))]
pub async fn replay(pool: &PgPool, id: i64) -> Result<JobSummary, ReplayError> {
    let replayed = store::replay(pool, id).await?;
    match replayed {
        Some(job) => {
            tracing::info!(destination = job.destination, event_id = job.event_id, "job replayed");
            Ok(job)
        }
        None => match store::exists(pool, id).await? {
            true => Err(ReplayError::Pending(id)),
            false => Err(ReplayError::NotFound(id)),
        },
    }
}

/// The dead jobs of `destination` created in `[since, until)`, oldest
/// first, at most `limit`: replayed, or only listed when `dry_run`.
#[instrument(skip_all, fields(destination))]
pub async fn replay_dead(
    pool: &PgPool,
    destination: &FilterValue,
    since: Option<Since>,
    until: Option<Since>,
    limit: u32,
    dry_run: bool,
) -> sqlx::Result<Vec<JobSummary>> {
    let conditions = JobConditions {
        destination: Some(destination.as_str()),
        since: since.map(|Since(since)| since),
        until: until.map(|Since(until)| until),
        ..JobConditions::default()
    };
    let mut jobs = store::replay_dead(pool, conditions, limit, dry_run).await?;
    jobs.sort_by_key(|job| (job.created_at, job.id));
    if !dry_run {
        tracing::info!(jobs = jobs.len(), "dead jobs replayed");
    }
    Ok(jobs)
}

/// Every job of event (`provider`, `event_id`), one per destination that
/// wanted it, by destination, each with its attempts.
#[instrument(skip_all)]
pub async fn of_event(pool: &PgPool, provider: &str, event_id: &str) -> sqlx::Result<Vec<JobDetail>> {
    let ids = store::of_event(pool, provider, event_id).await?;
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        // A job purged meanwhile is left out.
        jobs.extend(show(pool, id).await?);
    }
    Ok(jobs)
}
