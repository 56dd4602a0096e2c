//! `webhook-inbox purge --older-than 90d [--dry-run]`.

use std::io::Write;

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::config::DEFAULT_FAILED_RETENTION_DAYS;
use crate::operations::purge::{count_purgeable, count_purgeable_forwarding, purge, purge_forwarding};
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
    let (verb, purged, forwarding) = if args.dry_run {
        (
            "would delete",
            count_purgeable(pool, &policy).await?,
            count_purgeable_forwarding(pool, &policy).await?,
        )
    } else {
        let stop = CancellationToken::new();
        ("deleted", purge(pool, &policy, &stop).await?, purge_forwarding(pool, &policy, &stop).await?)
    };
    writeln!(
        out,
        "{verb} {} archive row(s): {} processed or skipped, {} failed; the dedup table is untouched",
        purged.total(),
        purged.processed_or_skipped,
        purged.failed
    )?;
    writeln!(
        out,
        "{verb} {} forwarding attempt(s), {} sent job(s), {} dead job(s); pending jobs are untouched",
        forwarding.attempts, forwarding.sent_jobs, forwarding.dead_jobs
    )?;
    Ok(())
}
