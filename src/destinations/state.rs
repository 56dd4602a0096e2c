//! The destinations' runtime state in the database (`destinations`): one row
//! per name, which every replica and the CLI read and write.

use sqlx::PgPool;
use tracing::instrument;

use super::Declaration;

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
