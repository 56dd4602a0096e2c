//! `webhook-inbox migrate`: apply the migrations and exit, for deploys that
//! migrate as a step of their own and then run `serve --no-migrate`. It
//! also makes the archive's day partitions ahead, and moves an archive the
//! upgrade to partitioned tables set aside into them (which `serve` would
//! otherwise do in the background).

use std::io::Write;

use anyhow::Context;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::db::{MIGRATOR, conversion, partitions};
use crate::operations::maintenance;

/// Applies every pending migration, then says where the schema is.
pub async fn run(pool: &PgPool, out: &mut dyn Write) -> anyhow::Result<()> {
    MIGRATOR.run(pool).await.context("applying migrations")?;
    if let Some(last) = MIGRATOR.iter().last() {
        writeln!(out, "database migrated: at {} ({})", last.version, last.description)?;
    }
    partitions::create_ahead(pool).await.context("making the day partitions ahead")?;
    if conversion::pending(pool).await? {
        let Some(lock) = maintenance::lock(pool).await? else {
            writeln!(out, "another process (serve) is moving the unpartitioned archive's rows")?;
            return Ok(());
        };
        let converted = conversion::convert(pool, &CancellationToken::new()).await;
        lock.release().await;
        let converted = converted.context("moving the unpartitioned archive's rows")?;
        writeln!(
            out,
            "moved {} archive row(s) and {} forwarding attempt(s) into the partitioned tables",
            converted.archive_rows, converted.attempts
        )?;
    }
    Ok(())
}
