//! `webhook-inbox purge --older-than 90d [--dry-run]`.

use std::io::Write;

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::config::DEFAULT_FAILED_RETENTION_DAYS;
use crate::operations::purge::{count_purgeable, purge};
use crate::operations::{Age, RetentionPolicy};

/// How old a row must be to go.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Delete PROCESSED and SKIPPED rows older than this: 90d, 12h, 30m (a bare number is days).
    #[arg(long)]
    pub older_than: Age,

    /// Delete FAILED rows older than this (at least --older-than); 0 keeps them.
    #[arg(long, env = "FAILED_RETENTION_DAYS", default_value_t = Age::days(DEFAULT_FAILED_RETENTION_DAYS))]
    pub failed_older_than: Age,

    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Purges (or counts) and prints the counts.
pub async fn run(pool: &PgPool, args: PurgeArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let policy = RetentionPolicy::new(args.older_than, Some(args.failed_older_than))?;
    let (verb, purged) = if args.dry_run {
        ("would delete", count_purgeable(pool, &policy).await?)
    } else {
        ("deleted", purge(pool, &policy, &CancellationToken::new()).await?)
    };
    writeln!(
        out,
        "{verb} {} archive row(s): {} processed or skipped, {} failed; the dedup table is untouched",
        purged.total(),
        purged.processed_or_skipped,
        purged.failed
    )?;
    Ok(())
}
