//! Moving an existing archive into the partitioned tables: migration
//! `20261202000100` renamed the old tables and gave their names to the
//! partitioned ones, so deliveries go there from its commit on; this moves
//! the old rows over, newest first, in batches, while deliveries go on,
//! and drops each old table once it is empty. Nothing to do on a database
//! that started partitioned (the migration dropped the empty old tables).

use std::time::Instant;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{AssertSqlSafe, PgPool};
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use super::partitions::{self, DayPartitioned};

/// Rows moved per statement: each batch is a short transaction, so it
/// holds back neither vacuum nor a concurrent detach for long.
pub const BATCH_SIZE: i64 = 2000;

/// An old table and where its rows go.
struct Conversion {
    /// The table the migration set aside.
    old: &'static str,
    /// The partitioned table that took its name.
    new: &'static str,
    /// The day partitions its rows need, and the old table's time column
    /// (with the condition of the rows that go to them).
    days: DayPartitioned,
    time: &'static str,
    dated: &'static str,
    /// The order rows are moved in: newest first, by an index of the old table.
    order: &'static str,
}

const CONVERSIONS: [Conversion; 2] = [
    Conversion {
        old: "webhook_events_unpartitioned",
        new: "webhook_events",
        days: partitions::ARCHIVE,
        time: "created_at",
        // FAILED rows go to webhook_events_failed, which has no days.
        dated: "processing_status <> 'FAILED'",
        order: "id DESC",
    },
    Conversion {
        old: "destination_attempts_unpartitioned",
        new: "destination_attempts",
        days: partitions::ATTEMPTS,
        time: "attempted_at",
        dated: "true",
        order: "attempted_at DESC",
    },
];

/// What a conversion moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Converted {
    /// Archive rows moved.
    pub archive_rows: u64,
    /// Forwarding attempts moved.
    pub attempts: u64,
}

/// Whether an old table is left to move.
pub async fn pending(pool: &PgPool) -> sqlx::Result<bool> {
    for conversion in &CONVERSIONS {
        if exists(pool, conversion.old).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Moves every row of the old tables, until none is left (each old table is
/// then dropped) or `stop` is cancelled (checked between batches; the next
/// call goes on from there). Progress is logged as it goes.
///
/// One process at a time should run it (the maintenance lock); were two to
/// run at once, none of a row's copies would be doubled: a row is inserted
/// from what the DELETE that removed it returned, and a row deleted by
/// somebody else is not returned.
#[instrument(skip_all)]
pub async fn convert(pool: &PgPool, stop: &CancellationToken) -> sqlx::Result<Converted> {
    let archive_rows = convert_one(pool, &CONVERSIONS[0], stop).await?;
    let attempts = match stop.is_cancelled() {
        true => 0,
        false => convert_one(pool, &CONVERSIONS[1], stop).await?,
    };
    Ok(Converted { archive_rows, attempts })
}

async fn convert_one(pool: &PgPool, conversion: &Conversion, stop: &CancellationToken) -> sqlx::Result<u64> {
    let Conversion { old, new, days, time, dated, order } = conversion;
    if !exists(pool, old).await? {
        return Ok(0);
    }
    // Every day the old rows fall on gets its partition first.
    let range: (Option<DateTime<Utc>>, Option<DateTime<Utc>>, f32) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT min({time}), max({time}), (SELECT reltuples FROM pg_class WHERE oid = '{old}'::regclass)
         FROM {old} WHERE {dated}"
    )))
    .fetch_one(pool)
    .await?;
    if let (Some(first), Some(last), _) = range {
        days.create(pool, first.date_naive(), last.date_naive()).await?;
    }
    let about = range.2.max(0.0) as u64;
    let columns: String = sqlx::query_scalar(
        "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
         WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped",
    )
    .bind(old)
    .fetch_one(pool)
    .await?;
    // OVERRIDING SYSTEM VALUE: the archive's ids stay what they were.
    let batch = format!(
        "WITH moved AS (
             DELETE FROM {old}
             WHERE ctid = ANY (ARRAY(SELECT ctid FROM {old} ORDER BY {order} LIMIT $1))
             RETURNING {columns}
         )
         INSERT INTO {new} ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM moved"
    );
    tracing::info!(table = new, rows = about, "moving the rows of the unpartitioned table, newest first");
    let started = Instant::now();
    let mut moved = 0;
    let mut logged = Instant::now();
    loop {
        if stop.is_cancelled() {
            tracing::info!(table = new, moved, "stopped moving rows; the next run goes on from here");
            return Ok(moved);
        }
        let rows =
            sqlx::query(AssertSqlSafe(batch.as_str())).bind(BATCH_SIZE).execute(pool).await?.rows_affected();
        moved += rows;
        if rows == 0 {
            break;
        }
        if logged.elapsed().as_secs() >= 5 {
            tracing::info!(table = new, moved, of_about = about, "moving rows into the partitioned table");
            logged = Instant::now();
        }
    }
    sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE IF EXISTS {old}"))).execute(pool).await?;
    tracing::info!(
        table = new,
        moved,
        secs = started.elapsed().as_secs_f64(),
        "every row is in the partitioned table; the unpartitioned one is dropped"
    );
    Ok(moved)
}

async fn exists(pool: &PgPool, table: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL").bind(table).fetch_one(pool).await
}
