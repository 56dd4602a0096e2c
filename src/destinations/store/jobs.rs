//! What operators do with jobs and their attempts, as statements: list,
//! show, replay; the test event's job; backfill's pages of jobs; purge's
//! batches of old ones.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder};
use tracing::instrument;

use crate::db::statement::delete_oldest;
use crate::destinations::sender::{Attempt, ForwardedEvent};
use crate::queue::Status;

/// The columns of [`JobSummary`], of `destination_jobs` aliased `j`.
const JOB_COLUMNS: &str = "j.id, j.destination, j.provider, j.event_id, j.event_type, j.status, j.attempts, \
     j.last_error, j.next_attempt_at, j.ordering_key, j.backfill, j.created_at, j.sent_at";

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

/// Conditions on jobs; every one given must hold.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobConditions<'a> {
    /// Of this destination.
    pub destination: Option<&'a str>,
    /// With this status.
    pub status: Option<Status>,
    /// Of this event id.
    pub event_id: Option<&'a str>,
    /// Created at or after then.
    pub since: Option<DateTime<Utc>>,
    /// Created before then.
    pub until: Option<DateTime<Utc>>,
}

impl JobConditions<'_> {
    /// Adds ` AND ...` for each condition, on `destination_jobs` aliased `j`.
    fn push(&self, sql: &mut QueryBuilder<Postgres>) {
        if let Some(destination) = self.destination {
            sql.push(" AND j.destination = ").push_bind(destination.to_owned());
        }
        if let Some(status) = self.status {
            // A closed set of literals: the partial indexes then apply.
            sql.push(format_args!(" AND j.status = {}", status.literal()));
        }
        if let Some(event_id) = self.event_id {
            sql.push(" AND j.event_id = ").push_bind(event_id.to_owned());
        }
        if let Some(since) = self.since {
            sql.push(" AND j.created_at >= ").push_bind(since);
        }
        if let Some(until) = self.until {
            sql.push(" AND j.created_at < ").push_bind(until);
        }
    }
}

/// Jobs matching `conditions`, newest first, at most `limit`, with an id
/// below `before` when given.
#[instrument(skip_all)]
pub async fn list(
    pool: &PgPool,
    conditions: JobConditions<'_>,
    limit: u32,
    before: Option<i64>,
) -> sqlx::Result<Vec<JobSummary>> {
    let mut sql =
        QueryBuilder::<Postgres>::new(format!("SELECT {JOB_COLUMNS} FROM destination_jobs j WHERE true"));
    conditions.push(&mut sql);
    if let Some(before) = before {
        sql.push(" AND j.id < ").push_bind(before);
    }
    sql.push(" ORDER BY j.id DESC LIMIT ").push_bind(i64::from(limit));
    sql.build_query_as().fetch_all(pool).await
}

/// A job as found by [`find`]: its row and the size of its body.
#[derive(sqlx::FromRow)]
pub struct FoundJob {
    /// The job.
    #[sqlx(flatten)]
    pub job: JobSummary,
    /// The size of the body it sends.
    pub body_bytes: i32,
}

/// Job `id`, or `None`.
static FIND: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT {JOB_COLUMNS}, length(j.body) AS body_bytes FROM destination_jobs j WHERE j.id = $1")
});

/// Job `id` with the size of its body ([`FIND`]), or `None`.
#[instrument(skip_all, fields(job_id = id))]
pub async fn find(pool: &PgPool, id: i64) -> sqlx::Result<Option<FoundJob>> {
    sqlx::query_as(FIND.as_str()).bind(id).fetch_optional(pool).await
}

/// Every attempt of job `id` (until purged), oldest first.
#[instrument(skip_all, fields(job_id = id))]
pub async fn attempts(pool: &PgPool, id: i64) -> sqlx::Result<Vec<JobAttempt>> {
    sqlx::query_as(
        "SELECT attempt, attempted_at, duration_ms, status_code, error, response_body
         FROM destination_attempts WHERE job_id = $1 ORDER BY attempt, attempted_at",
    )
    .bind(id)
    .fetch_all(pool)
    .await
}

/// The ids of every job of event (`provider`, `event_id`), by destination.
#[instrument(skip_all)]
pub async fn of_event(pool: &PgPool, provider: &str, event_id: &str) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "SELECT id FROM destination_jobs WHERE event_id = $1 AND provider = $2 ORDER BY destination",
    )
    .bind(event_id)
    .bind(provider)
    .fetch_all(pool)
    .await
}

/// Makes the jobs it is followed by (`WHERE ...` on `j`) pending again from
/// now, their retry schedule started afresh, their claim dropped.
static REPLAY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE destination_jobs AS j
         SET status = {pending}, schedule_from = j.attempts, next_attempt_at = now(), last_error = NULL,
             locked_until = NULL, claim_token = NULL, sent_at = NULL",
        pending = Status::Pending.literal()
    )
});

/// [`REPLAY`] of job `$1` unless it is pending (a replay would race its
/// send), returning it.
static REPLAY_ONE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} WHERE j.id = $1 AND j.status <> {} RETURNING {JOB_COLUMNS}",
        *REPLAY,
        Status::Pending.literal()
    )
});

/// Replays job `id` ([`REPLAY_ONE`]); returns it, or `None`: no such job,
/// or pending.
#[instrument(skip_all, fields(job_id = id))]
pub async fn replay(pool: &PgPool, id: i64) -> sqlx::Result<Option<JobSummary>> {
    sqlx::query_as(REPLAY_ONE.as_str()).bind(id).fetch_optional(pool).await
}

/// Whether job `id` exists.
pub async fn exists(pool: &PgPool, id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT FROM destination_jobs WHERE id = $1)")
        .bind(id)
        .fetch_one(pool)
        .await
}

/// The dead jobs matching `conditions`, oldest first, at most `limit`:
/// replayed ([`REPLAY`]), or only read when `dry_run`.
#[instrument(skip_all)]
pub async fn replay_dead(
    pool: &PgPool,
    conditions: JobConditions<'_>,
    limit: u32,
    dry_run: bool,
) -> sqlx::Result<Vec<JobSummary>> {
    let conditions = JobConditions { status: Some(Status::Dead), ..conditions };
    let mut statement = match dry_run {
        true => QueryBuilder::<Postgres>::new(format!(
            "SELECT {JOB_COLUMNS} FROM destination_jobs j WHERE j.id IN ("
        )),
        false => QueryBuilder::<Postgres>::new(format!(
            "{} WHERE j.status = {} AND j.id IN (",
            *REPLAY,
            Status::Dead.literal()
        )),
    };
    statement.push("SELECT j.id FROM destination_jobs j WHERE true");
    conditions.push(&mut statement);
    statement.push(" ORDER BY j.created_at, j.id LIMIT ").push_bind(i64::from(limit)).push(")");
    if !dry_run {
        statement.push(format_args!(" RETURNING {JOB_COLUMNS}"));
    }
    statement.build_query_as().fetch_all(pool).await
}

/// Records a test event's one attempt as a job of its own, settled at once:
/// `sent`, or `dead` (a test is never retried; a replay sends it again).
/// The circuit breaker does not count it: an operator's probe.
static RECORD_TEST: LazyLock<String> = LazyLock::new(|| {
    let (sent, dead) = (Status::Sent.literal(), Status::Dead.literal());
    format!(
        "WITH job AS (
             INSERT INTO destination_jobs
                 (destination, provider, event_id, event_type, occurred_at, body, status, attempts,
                  last_error, next_attempt_at, sent_at)
             VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7::text IS NULL THEN {sent} ELSE {dead} END, 1,
                     $7, $5, CASE WHEN $7::text IS NULL THEN now() END)
             RETURNING id
         )
         INSERT INTO destination_attempts
             (attempted_at, job_id, attempt, destination, duration_ms, status_code, error, response_body)
         SELECT $5, id, 1, $1, $8, $9, $7, $10 FROM job
         RETURNING job_id"
    )
});

/// Records `event`, sent to `destination` outside the queue, and what its
/// one `attempt` did in `duration_ms` ([`RECORD_TEST`]); returns the job.
pub async fn record_test(
    pool: &PgPool,
    destination: &str,
    event: &ForwardedEvent<'_>,
    attempt: &Attempt,
    duration_ms: f64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(RECORD_TEST.as_str())
        .bind(destination)
        .bind(event.provider)
        .bind(event.event_id)
        .bind(event.event_type)
        .bind(event.occurred_at)
        .bind(event.body.as_ref())
        .bind(attempt.error.as_deref())
        .bind(duration_ms)
        .bind(attempt.status.map(|s| s as i16))
        .bind(&attempt.body)
        .fetch_one(pool)
        .await
}

/// The condition, on an archive row aliased `w`, that destination `$5` has
/// no job of its event yet: read through the jobs' unique index, event
/// first. A backfill's page reads only those.
macro_rules! without_job {
    () => {
        "NOT EXISTS (SELECT FROM destination_jobs AS j
                     WHERE j.event_id = w.event_id AND j.provider = w.provider AND j.destination = $5)"
    };
}
pub(crate) use without_job;

/// A page of backfilled jobs of one destination, column by column (bound
/// as arrays), in the order they are inserted.
#[derive(Default)]
pub struct BackfillJobs {
    /// Each job's ordering key.
    pub ordering_keys: Vec<Option<String>>,
    /// Each job's body.
    pub bodies: Vec<Vec<u8>>,
    /// Each event's provider.
    pub providers: Vec<String>,
    /// Each event's id.
    pub event_ids: Vec<String>,
    /// Each event's type.
    pub event_types: Vec<String>,
    /// When each event happened.
    pub occurred_at: Vec<Option<DateTime<Utc>>>,
}

impl BackfillJobs {
    /// Inserts them for destination `name`, marked `backfill`, but for the
    /// events that have a job of it already (`ON CONFLICT DO NOTHING` on
    /// the jobs' unique constraint); returns how many were new.
    pub async fn insert(self, pool: &PgPool, name: &str) -> sqlx::Result<u64> {
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

/// A kind of job purge deletes: its batch (`$1` its age in seconds, `$2`
/// the batch's size) and the count of the purgeable (`$1` its age).
pub struct Purgeable {
    /// Deletes the oldest of the kind.
    pub batch: String,
    /// Counts the kind older than the age.
    pub count: String,
}

impl Purgeable {
    /// Jobs of `status`, aged by `time`.
    fn of(status: Status, time: &str) -> Purgeable {
        let kind = format!("status = {}", status.literal());
        Purgeable {
            batch: delete_oldest("destination_jobs", "id", &kind, time),
            count: format!(
                "SELECT count(*) FROM destination_jobs
                 WHERE {kind} AND {time} < now() - make_interval(secs => $1::float8)"
            ),
        }
    }
}

/// Sent jobs, by when they were sent.
pub static SENT: LazyLock<Purgeable> = LazyLock::new(|| Purgeable::of(Status::Sent, "sent_at"));

/// Dead jobs, by when they were created.
pub static DEAD: LazyLock<Purgeable> = LazyLock::new(|| Purgeable::of(Status::Dead, "created_at"));
