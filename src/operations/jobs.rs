//! What operators do with forwarding jobs: list them, show one with its
//! attempts, replay one, or every dead job of a destination in a time range.

use chrono::{DateTime, Utc};
use clap::Args;
use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres, QueryBuilder};
use tracing::instrument;

use super::age::Since;
use super::filter::{FilterValue, parsed};
use crate::destinations::signer::message_id;
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
    fn push_conditions(&self, sql: &mut QueryBuilder<Postgres>) {
        if let Some(destination) = &self.destination {
            sql.push(" AND j.destination = ").push_bind(destination.as_str().to_owned());
        }
        if let Some(status) = self.status {
            // A closed set of literals: the partial indexes then apply.
            sql.push(format_args!(" AND j.status = '{}'", status.as_str()));
        }
        if let Some(event_id) = &self.event_id {
            sql.push(" AND j.event_id = ").push_bind(event_id.as_str().to_owned());
        }
        if let Some(Since(since)) = self.since {
            sql.push(" AND j.created_at >= ").push_bind(since);
        }
        if let Some(Since(until)) = self.until {
            sql.push(" AND j.created_at < ").push_bind(until);
        }
    }
}

/// The columns of [`JobSummary`], of `destination_jobs` aliased `j`.
macro_rules! job_columns {
    () => {
        "j.id, j.destination, j.provider, j.event_id, j.event_type, j.status, j.attempts, \
         j.last_error, j.next_attempt_at, j.ordering_key, j.backfill, j.created_at, j.sent_at"
    };
}
const JOB_COLUMNS: &str = job_columns!();

/// Makes a job pending again from now, its retry schedule started afresh.
macro_rules! replay {
    () => {
        "UPDATE destination_jobs AS j
         SET status = 'pending', schedule_from = j.attempts, next_attempt_at = now(), last_error = NULL,
             locked_until = NULL, claim_token = NULL, sent_at = NULL"
    };
}

/// A forwarding job as operators list it: its row without the body.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct JobSummary {
    /// The job's id, which `show` and `replay` take.
    pub id: i64,
    /// Where it goes.
    pub destination: String,
    /// The event's provider.
    pub provider: String,
    /// The event's id.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// pending, sent or dead.
    pub status: String,
    /// Attempts made (replays count on).
    pub attempts: i32,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When a pending job is due.
    pub next_attempt_at: DateTime<Utc>,
    /// The entity or key, for a destination that orders by one.
    pub ordering_key: Option<String>,
    /// Enqueued by `destinations backfill`, not when the event was recorded.
    pub backfill: bool,
    /// When the job was written.
    pub created_at: DateTime<Utc>,
    /// When the destination answered 2xx.
    pub sent_at: Option<DateTime<Utc>>,
}

impl JobSummary {
    /// Where the job came from: `live` (the event's first recording) or `backfill`.
    pub fn origin(&self) -> &'static str {
        if self.backfill { "backfill" } else { "live" }
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
    let mut sql =
        QueryBuilder::<Postgres>::new(format!("SELECT {JOB_COLUMNS} FROM destination_jobs j WHERE true"));
    filter.push_conditions(&mut sql);
    if let Some(before) = before {
        sql.push(" AND j.id < ").push_bind(before);
    }
    sql.push(" ORDER BY j.id DESC LIMIT ").push_bind(i64::from(limit));
    sql.build_query_as().fetch_all(pool).await
}

/// One attempt of a job.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct JobAttempt {
    /// The attempt's number.
    pub attempt: i32,
    /// When it started.
    pub attempted_at: DateTime<Utc>,
    /// How long it took.
    pub duration_ms: f64,
    /// The answer's status; `None` when there was none.
    pub status_code: Option<i16>,
    /// Why it failed; `None` for a 2xx.
    pub error: Option<String>,
    /// The first KiB of the answer's body.
    pub response_body: String,
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
    let found: Option<(i32,)> = sqlx::query_as("SELECT length(body) FROM destination_jobs WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?;
    let Some((body_bytes,)) = found else { return Ok(None) };
    let job: JobSummary =
        sqlx::query_as(concat!("SELECT ", job_columns!(), " FROM destination_jobs j WHERE j.id = $1"))
            .bind(id)
            .fetch_one(pool)
            .await?;
    let attempts_made = sqlx::query_as(
        "SELECT attempt, attempted_at, duration_ms, status_code, error, response_body
         FROM destination_attempts WHERE job_id = $1 ORDER BY attempt, attempted_at",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
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
    let replayed: Option<JobSummary> = sqlx::query_as(concat!(
        replay!(),
        " WHERE j.id = $1 AND j.status <> 'pending' RETURNING ",
        job_columns!()
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?;
    match replayed {
        Some(job) => {
            tracing::info!(destination = job.destination, event_id = job.event_id, "job replayed");
            Ok(job)
        }
        None => match sqlx::query_scalar::<_, String>("SELECT status FROM destination_jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
        {
            Some(_) => Err(ReplayError::Pending(id)),
            None => Err(ReplayError::NotFound(id)),
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
    let filter = JobFilter {
        destination: Some(destination.clone()),
        status: Some(Status::Dead),
        since,
        until,
        ..JobFilter::default()
    };
    let mut statement = match dry_run {
        true => QueryBuilder::<Postgres>::new(format!(
            "SELECT {JOB_COLUMNS} FROM destination_jobs j WHERE j.id IN ("
        )),
        false => QueryBuilder::<Postgres>::new(concat!(replay!(), " WHERE j.status = 'dead' AND j.id IN (")),
    };
    statement.push("SELECT j.id FROM destination_jobs j WHERE true");
    filter.push_conditions(&mut statement);
    statement.push(" ORDER BY j.created_at, j.id LIMIT ").push_bind(i64::from(limit)).push(")");
    if !dry_run {
        statement.push(format_args!(" RETURNING {JOB_COLUMNS}"));
    }
    let mut jobs: Vec<JobSummary> = statement.build_query_as().fetch_all(pool).await?;
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
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM destination_jobs WHERE event_id = $1 AND provider = $2 ORDER BY destination",
    )
    .bind(event_id)
    .bind(provider)
    .fetch_all(pool)
    .await?;
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        // A job purged meanwhile is left out.
        jobs.extend(show(pool, id).await?);
    }
    Ok(jobs)
}
