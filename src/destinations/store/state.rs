//! The destinations' runtime state in the database (`destinations`): one row
//! per name, which every replica and the CLI read and write; and the one
//! reading of each destination's state and backlog ([`overview`]), which
//! operators' listings and the metrics share.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tracing::instrument;

use crate::destinations::Declaration;
use crate::queue::Status;

/// Makes sure every declared destination has its row (a new one starts
/// running, closed circuit, full token bucket); rows of destinations no
/// longer declared stay, with their jobs, until declared again.
#[instrument(skip_all)]
pub async fn declare(pool: &PgPool, declaration: &Declaration) -> sqlx::Result<()> {
    let names: Vec<&str> = declaration.iter().map(|d| d.name.as_str()).collect();
    if names.is_empty() {
        return Ok(());
    }
    sqlx::query("INSERT INTO destinations (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING")
        .bind(names)
        .execute(pool)
        .await?;
    Ok(())
}

/// Pauses `name`: nothing is sent, jobs accumulate. Whether it exists.
#[instrument(skip_all, fields(destination = name))]
pub async fn pause(pool: &PgPool, name: &str) -> sqlx::Result<bool> {
    let paused =
        sqlx::query("UPDATE destinations SET paused_at = coalesce(paused_at, now()) WHERE name = $1")
            .bind(name)
            .execute(pool)
            .await?;
    Ok(paused.rows_affected() == 1)
}

/// Resumes `name`: paused, disabled by a 410, or with its circuit open, it
/// is sent to again, its waiting jobs first. Whether it exists.
#[instrument(skip_all, fields(destination = name))]
pub async fn resume(pool: &PgPool, name: &str) -> sqlx::Result<bool> {
    let resumed = sqlx::query(
        "UPDATE destinations
         SET paused_at = NULL, disabled_at = NULL, consecutive_failures = 0, circuit_open_until = NULL
         WHERE name = $1",
    )
    .bind(name)
    .execute(pool)
    .await?;
    Ok(resumed.rows_affected() == 1)
}

/// A destination's state, from its row (`d`): `paused`, `disabled` (it
/// answered 410), `circuit_open`, `circuit_half_open` (open past its
/// cool-down: one probe may go) or `running`, the first that holds, in
/// that order. One of [`STATES`].
const STATE: &str = "CASE WHEN d.paused_at IS NOT NULL THEN 'paused'
                          WHEN d.disabled_at IS NOT NULL THEN 'disabled'
                          WHEN d.circuit_open_until > now() THEN 'circuit_open'
                          WHEN d.circuit_open_until IS NOT NULL THEN 'circuit_half_open'
                          ELSE 'running' END";

/// Every value [`STATE`] takes.
pub const STATES: [&str; 5] = ["running", "paused", "disabled", "circuit_open", "circuit_half_open"];

/// A destination's row and its backlog, as operators and the metrics see it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Overview {
    /// The name.
    pub name: String,
    /// One of [`STATES`].
    pub state: String,
    /// Since when it is paused.
    pub paused_at: Option<DateTime<Utc>>,
    /// Since when it is disabled by a 410.
    pub disabled_at: Option<DateTime<Utc>>,
    /// Seconds since it was paused, on the database's clock (0: it is not).
    pub paused_seconds: f64,
    /// Seconds since it was disabled, on the database's clock (0: it is not).
    pub disabled_seconds: f64,
    /// Failed attempts in a row.
    pub consecutive_failures: i32,
    /// Until when the circuit is open (in the past: half open).
    pub circuit_open_until: Option<DateTime<Utc>>,
    /// Jobs waiting to be sent or retried.
    pub pending: i64,
    /// Age in seconds of the oldest pending job (0: none).
    pub oldest_pending_secs: f64,
    /// Jobs given up.
    pub dead: i64,
}

/// Every destination with a row, by name, in one statement over the partial
/// indexes of pending and dead jobs.
static OVERVIEW: LazyLock<String> = LazyLock::new(|| {
    let (pending, dead) = (Status::Pending.literal(), Status::Dead.literal());
    format!(
        "SELECT d.name, {STATE} AS state, d.paused_at, d.disabled_at,
                coalesce(extract(epoch FROM now() - d.paused_at)::float8, 0) AS paused_seconds,
                coalesce(extract(epoch FROM now() - d.disabled_at)::float8, 0) AS disabled_seconds,
                d.consecutive_failures, d.circuit_open_until,
                (SELECT count(*) FROM destination_jobs j WHERE j.destination = d.name AND j.status = {pending})
                    AS pending,
                coalesce((SELECT extract(epoch FROM now() - min(j.created_at))::float8
                          FROM destination_jobs j WHERE j.destination = d.name AND j.status = {pending}), 0)
                    AS oldest_pending_secs,
                (SELECT count(*) FROM destination_jobs j WHERE j.destination = d.name AND j.status = {dead})
                    AS dead
         FROM destinations d ORDER BY d.name"
    )
});

/// Every destination with a row ([`OVERVIEW`]): its state and backlog.
#[instrument(skip_all)]
pub async fn overview(pool: &PgPool) -> sqlx::Result<Vec<Overview>> {
    sqlx::query_as(OVERVIEW.as_str()).fetch_all(pool).await
}
