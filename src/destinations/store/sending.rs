//! The queue's statements: the claim, the record and the give-back of
//! each destination's jobs, which the engine runs in its steps
//! (`crate::queue`) for [`DestinationQueue`](crate::destinations::DestinationQueue).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection};

use crate::db::statement::{PgQuery, numbered};
use crate::destinations::declaration::{Destination, Ordering};
use crate::destinations::jobs::ClaimedJob;
use crate::destinations::sender::Attempt;
use crate::queue::sql::{bind_record, bind_release, queue_due, queue_lease, queue_record, queue_release};
use crate::queue::{Done, Status};

/// Gives back jobs claimed but not sent.
const RELEASE: &str = queue_release!("destination_jobs", "int8");

/// The claim, for one destination (`$4`), within its rate limit (`$5`
/// requests/s, bursts of `$6`; NULL: unlimited).
///
/// Why the destination's row is locked (`FOR UPDATE`) by every claim: the
/// token bucket and the circuit's probe live there, and the replicas must
/// take turns to spend them. A claim that waited reads the row as the one
/// before left it.
///
/// `{ordered}` is where an ordered claim adds its condition ([`CLAIM_ORDERED`]).
macro_rules! claim {
    () => {
        concat!(
            "WITH state AS MATERIALIZED (
                 SELECT name,
                        CASE WHEN $5::float8 IS NULL THEN NULL
                             -- In seconds as float8: a new row's -infinity refills it whole.
                             ELSE least($6::float8, tokens + $5 * greatest(0, extract(epoch FROM $1) - extract(epoch FROM tokens_at)))
                        END AS tokens,
                        -- Open past its cool-down: half open, one probe goes.
                        circuit_open_until IS NOT NULL AS probe
                 FROM destinations
                 WHERE name = $4 AND paused_at IS NULL AND disabled_at IS NULL
                   AND (circuit_open_until IS NULL OR circuit_open_until <= $1)
                 FOR UPDATE
             ),
             due AS MATERIALIZED (
                 SELECT j.id FROM destination_jobs AS j
                 WHERE j.destination = $4 AND ",
            queue_due!("j"),
            "{ordered}

                 -- Live jobs first: a backfill's never queue ahead of a fresh event.
                 ORDER BY j.backfill, j.next_attempt_at, j.id
                 LIMIT coalesce((SELECT CASE WHEN probe THEN least($3, 1)
                                             ELSE least($3, floor(coalesce(tokens, $3)))::bigint END
                                 FROM state), 0)
                 FOR UPDATE OF j SKIP LOCKED
             ),
             claimed AS (
                 UPDATE destination_jobs AS o SET ",
            queue_lease!("o"),
            " FROM due WHERE o.id = due.id AND ",
            queue_due!("o"),
            "
                 RETURNING o.id, o.claim_token, o.attempts, o.schedule_from, o.provider, o.event_id,
                           o.event_type, o.occurred_at, o.body, o.traceparent, o.backfill
             ),
             spent AS (
                 UPDATE destinations AS d
                 SET tokens = coalesce(s.tokens - (SELECT count(*) FROM claimed), d.tokens),
                     -- Never back: a replica whose clock is behind refills nothing.
                     tokens_at = greatest(d.tokens_at, $1),
                     -- A probe holds the circuit half open until its lease ends.
                     circuit_open_until = CASE WHEN s.probe THEN $2 ELSE d.circuit_open_until END
                 FROM state AS s
                 WHERE d.name = s.name AND EXISTS (SELECT FROM claimed)
             )
             SELECT * FROM claimed"
        )
    };
}

/// Any order.
static CLAIM: LazyLock<String> = LazyLock::new(|| format!(claim!(), ordered = ""));

/// One event of an entity at a time, in order: a job is due only when no
/// other pending job of its entity is older, or in flight (leased). Run in
/// a transaction after the destination's row is locked (see
/// [`claim`]).
static CLAIM_ORDERED: LazyLock<String> = LazyLock::new(|| {
    let pending = Status::Pending.literal();
    let ordered = format!(
        "
                   AND (j.ordering_key IS NULL OR NOT EXISTS (
                        SELECT FROM destination_jobs AS e
                        WHERE e.destination = j.destination AND e.ordering_key = j.ordering_key
                          AND e.status = {pending} AND e.id <> j.id
                          AND (e.id < j.id OR e.locked_until > $1)))"
    );
    format!(claim!(), ordered = ordered)
});

/// The record: the engine's (`$1` to `$5`, [`bind_record`]), then the
/// attempts, then the circuit breaker and a 410's disabling on the
/// destination's row. Parameters as [`RECORD_PARAMETERS`] names them.
static RECORD: LazyLock<String> = LazyLock::new(|| {
    numbered(
        concat!(
            "WITH recorded AS (",
            queue_record!("destination_jobs", "int8"),
            " RETURNING q.id),
             attempts AS (
                 INSERT INTO destination_attempts
                     (attempted_at, job_id, attempt, destination, duration_ms, status_code, error, response_body)
                 SELECT a.attempted_at, a.job_id, a.attempt, $destination, a.duration_ms, a.status_code, a.error,
                        a.body
                 FROM unnest($started_at::timestamptz[], $1::int8[], $attempt::int4[], $duration_ms::float8[],
                             $status_code::int2[], $4::text[], $response_body::text[])
                      AS a(attempted_at, job_id, attempt, duration_ms, status_code, error, body)
                 -- A record repeated after a lost answer writes each attempt once.
                 ON CONFLICT DO NOTHING
             ),
             failures AS (
                 SELECT CASE WHEN $any_sent THEN $failures_after ELSE consecutive_failures + $failures_after END AS n
                 FROM destinations WHERE name = $destination
             )
             UPDATE destinations
             SET consecutive_failures = failures.n,
                 circuit_open_until = CASE WHEN failures.n >= $circuit_failures THEN $reopen_at
                                           WHEN $any_sent THEN NULL
                                           ELSE circuit_open_until END,
                 disabled_at = CASE WHEN $gone THEN coalesce(disabled_at, now()) ELSE disabled_at END
             FROM failures
             WHERE name = $destination"
        ),
        &RECORD_PARAMETERS,
    )
});

/// [`RECORD`]'s parameters in binding order: the engine's five
/// ([`bind_record`]), then the destination's.
const RECORD_PARAMETERS: [&str; 16] = [
    "id",
    "claim_token",
    "status",
    "error",
    "retry_at",
    "destination",
    "started_at",
    "attempt",
    "duration_ms",
    "status_code",
    "response_body",
    "any_sent",
    "failures_after",
    "circuit_failures",
    "reopen_at",
    "gone",
];

/// Binds [`RECORD`]'s parameters for `done`, sent to `destination`: the
/// engine's, each send's attempt, and how the circuit moves.
fn bind_attempts<'q>(destination: &'q Destination, done: &'q [Done<ClaimedJob, Attempt>]) -> PgQuery<'q> {
    // The circuit counts consecutive failures, in the order the sends ended.
    let last_success = done.iter().rposition(|d| d.attempt.error.is_none());
    let failures_after = done[last_success.map_or(0, |i| i + 1)..].len() as i32;
    let circuit = destination.circuit;
    // On the engine's clock, from the end of the last send.
    let ended =
        done.iter().map(|d| d.started_at + chrono::Duration::from_std(d.duration).unwrap_or_default()).max();
    let reopen_at = ended.unwrap_or_else(Utc::now)
        + chrono::Duration::from_std(circuit.cooldown).unwrap_or(chrono::Duration::MAX);
    bind_record(sqlx::query(RECORD.as_str()), done)
        .bind(&destination.name)
        .bind(done.iter().map(|d| d.started_at).collect::<Vec<_>>())
        .bind(done.iter().map(|d| d.row.attempts).collect::<Vec<_>>())
        .bind(done.iter().map(|d| d.duration.as_secs_f64() * 1000.0).collect::<Vec<_>>())
        .bind(done.iter().map(|d| d.attempt.status.map(|s| s as i16)).collect::<Vec<_>>())
        .bind(done.iter().map(|d| d.attempt.body.as_str()).collect::<Vec<_>>())
        .bind(last_success.is_some())
        .bind(failures_after)
        .bind(i32::try_from(circuit.failures).unwrap_or(i32::MAX))
        .bind(reopen_at)
        .bind(done.iter().any(|d| d.attempt.gone()))
}

/// Claims up to `limit` of `destination`'s due jobs at `now`, leased until
/// `lease_until` ([`CLAIM`], or [`CLAIM_ORDERED`] for a destination that
/// orders).
pub async fn claim(
    conn: &mut PgConnection,
    destination: &Destination,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    limit: usize,
) -> sqlx::Result<Vec<ClaimedJob>> {
    let claim = |sql: &'static str| {
        sqlx::query_as::<_, ClaimedJob>(sql)
            .bind(now)
            .bind(lease_until)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(&destination.name)
            .bind(destination.rate_limit)
            .bind(destination.rate_limit.map(|rate| rate.max(1.0)))
    };
    match destination.ordering {
        Ordering::None => claim(CLAIM.as_str()).fetch_all(conn).await,
        // Why a transaction that locks the row first: the claim must see
        // every claim made before it. A single statement reads with the
        // snapshot it started with, and one that waited for another
        // replica's claim would not see that claim's leases, and could
        // send an entity's next event while the previous one is in flight.
        Ordering::Entity | Ordering::Key => {
            let mut tx = conn.begin().await?;
            sqlx::query("SELECT FROM destinations WHERE name = $1 FOR UPDATE")
                .bind(&destination.name)
                .execute(&mut *tx)
                .await?;
            let claimed = claim(CLAIM_ORDERED.as_str()).fetch_all(&mut *tx).await?;
            tx.commit().await?;
            Ok(claimed)
        }
    }
}

/// Records what happened to `done`, sent to `destination` ([`RECORD`]).
pub async fn record(
    conn: &mut PgConnection,
    destination: &Destination,
    done: &[Done<ClaimedJob, Attempt>],
) -> sqlx::Result<()> {
    bind_attempts(destination, done).execute(conn).await?;
    Ok(())
}

/// Gives back `jobs`, claimed but not sent ([`RELEASE`]).
pub async fn release(conn: &mut PgConnection, jobs: &[ClaimedJob]) -> sqlx::Result<()> {
    bind_release(sqlx::query(RELEASE), jobs).execute(conn).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::statement::parameters;

    #[test]
    fn the_record_binds_every_parameter_it_names() {
        assert_eq!(parameters(&RECORD), RECORD_PARAMETERS.len(), "{}", *RECORD);
    }
}
