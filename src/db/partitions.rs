//! The tables partitioned by day (migration `20261202000100`): the archive's
//! rows that are not FAILED, and the forwarding attempts. Their partitions
//! are made ahead of the days they hold, and retention drops them whole
//! once their day is old enough: no row-by-row delete, no dead tuples for
//! vacuum, almost no WAL.

use chrono::NaiveDate;
use sqlx::{AssertSqlSafe, PgExecutor, PgPool};
use tracing::instrument;

/// A table partitioned by range of a `timestamptz`, one partition per UTC
/// day, named `<table>_pYYYYMMDD` (the migration's `create_day_partitions`
/// makes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayPartitioned {
    /// The partitioned table.
    pub table: &'static str,
}

/// The archive's PROCESSED, SKIPPED (and PENDING) rows, by `created_at`.
/// FAILED rows live in `webhook_events_failed`, which is not partitioned by
/// day: they are kept longer, and purged in batches (`operations::purge`).
pub const ARCHIVE: DayPartitioned = DayPartitioned { table: "webhook_events_daily" };

/// Every forwarding attempt, by `attempted_at`.
pub const ATTEMPTS: DayPartitioned = DayPartitioned { table: "destination_attempts" };

/// Every table partitioned by day.
pub const ALL: [DayPartitioned; 2] = [ARCHIVE, ATTEMPTS];

/// Days made ahead of today: a week in which the hourly maintenance may
/// fail (the database away, a role that may not create tables) before a
/// delivery finds no partition for its row.
pub const DAYS_AHEAD: i32 = 7;

/// One day's partition, attached or left behind by a drop cut short.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DayPartition {
    /// The table's name.
    pub name: String,
    /// The UTC day it holds.
    pub day: NaiveDate,
    /// Whether it is still a partition (false: detached, not yet dropped).
    pub attached: bool,
    /// Whether a concurrent detach of it was interrupted.
    pub detach_pending: bool,
}

impl DayPartitioned {
    /// Makes the partitions of the UTC days `first` to `last` that do not
    /// exist; returns how many it made.
    pub async fn create<'e>(
        self,
        executor: impl PgExecutor<'e>,
        first: NaiveDate,
        last: NaiveDate,
    ) -> sqlx::Result<i32> {
        sqlx::query_scalar("SELECT create_day_partitions($1::regclass, $2, $3)")
            .bind(self.table)
            .bind(first)
            .bind(last)
            .fetch_one(executor)
            .await
    }

    /// Its day partitions whose day ended more than `age_secs` ago, by the
    /// database's clock, oldest first; tables of a drop cut short included.
    pub async fn ended_before(self, pool: &PgPool, age_secs: f64) -> sqlx::Result<Vec<DayPartition>> {
        sqlx::query_as(
            "SELECT * FROM (
                 SELECT c.relname::text AS name,
                        -- Guarded: to_date fails on any other table's name.
                        CASE WHEN c.relname ~ ('^' || $1 || '_p[0-9]{8}$')
                             THEN to_date(right(c.relname, 8), 'YYYYMMDD') END AS day,
                        i.inhrelid IS NOT NULL AS attached,
                        coalesce(i.inhdetachpending, false) AS detach_pending
                 FROM pg_class c
                 LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = $1::regclass
                 WHERE c.relkind = 'r'
                   AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = $1::regclass)
             ) p
             WHERE (p.day + 1)::timestamp AT TIME ZONE 'UTC' <= now() - make_interval(secs => $2)
             ORDER BY p.day",
        )
        .bind(self.table)
        .bind(age_secs)
        .fetch_all(pool)
        .await
    }

    /// The rows of one of its partitions.
    pub async fn rows(self, pool: &PgPool, partition: &DayPartition) -> sqlx::Result<i64> {
        let count = format!("SELECT count(*) FROM {}", quoted(&partition.name));
        sqlx::query_scalar(AssertSqlSafe(count)).fetch_one(pool).await
    }

    /// Detaches `partition` and drops it.
    ///
    /// Why `CONCURRENTLY`: a plain DETACH (or a DROP of the partition) locks
    /// the whole table ACCESS EXCLUSIVE, so every delivery would wait for
    /// it, and for whatever long query it waits for first; a concurrent
    /// detach takes SHARE UPDATE EXCLUSIVE, which inserts do not conflict
    /// with. It cannot run in a transaction, and if it is cut short (the
    /// process killed, a statement timeout) the partition stays marked
    /// pending: the next call finishes that detach, and a table detached
    /// but not dropped is dropped.
    #[instrument(skip_all, fields(table = self.table, partition = %partition.name))]
    pub async fn drop_partition(self, pool: &PgPool, partition: &DayPartition) -> sqlx::Result<()> {
        let name = quoted(&partition.name);
        if partition.attached {
            let how = if partition.detach_pending { "FINALIZE" } else { "CONCURRENTLY" };
            sqlx::raw_sql(AssertSqlSafe(format!("ALTER TABLE {} DETACH PARTITION {name} {how}", self.table)))
                .execute(pool)
                .await?;
        }
        sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE IF EXISTS {name}"))).execute(pool).await?;
        Ok(())
    }
}

/// Makes the partitions of every table partitioned by day from yesterday (a
/// transaction begun before midnight inserts with its start time) to
/// [`DAYS_AHEAD`] days ahead, by the database's clock; returns how many it
/// made. Safe from several processes at once (`create_day_partitions`
/// takes a lock), cheap when they exist: `serve` calls it at startup and
/// hourly, `migrate` once.
#[instrument(skip_all)]
pub async fn create_ahead(pool: &PgPool) -> sqlx::Result<i32> {
    let today: NaiveDate =
        sqlx::query_scalar("SELECT (now() AT TIME ZONE 'UTC')::date").fetch_one(pool).await?;
    let mut created = 0;
    for table in ALL {
        created += table
            .create(pool, today.pred_opt().unwrap_or(today), today + chrono::Days::new(DAYS_AHEAD as u64))
            .await?;
    }
    Ok(created)
}

/// A partition's name as an SQL identifier: what makes the statements
/// above safe to build from text. The names come from the catalog, matched
/// to `<table>_pYYYYMMDD`, so there is nothing to escape, but quoting
/// costs nothing.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
