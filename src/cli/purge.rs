//! `webhook-inbox purge --older-than 90d [--dry-run]`.

use std::io::Write;

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::config::DEFAULT_FAILED_RETENTION_DAYS;
use crate::operations::purge::{
    Purged, PurgedForwarding, count_purgeable, count_purgeable_forwarding, purge, purge_forwarding,
};
use crate::operations::{Age, RetentionPolicy, maintenance};

/// How old a row must be to go.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Delete PROCESSED and SKIPPED rows (a UTC day at a time) of the days that ended more than this ago: 90d, 12h, 30m (a bare number is days).
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
    let (verb, purged, forwarding) = match args.dry_run {
        true => (
            "would delete",
            count_purgeable(pool, &policy).await?,
            count_purgeable_forwarding(pool, &policy).await?,
        ),
        false => {
            let Some(lock) = maintenance::lock(pool).await? else {
                anyhow::bail!(
                    "another process is purging the archive right now (serve's hourly upkeep): try again shortly"
                );
            };
            let purged = purge_all(pool, &policy).await;
            lock.release().await;
            let (purged, forwarding) = purged?;
            ("deleted", purged, forwarding)
        }
    };
    writeln!(
        out,
        "{verb} {} archive row(s): {} processed or skipped (in {} day partition(s)), {} failed; \
         the dedup table is untouched",
        purged.total(),
        purged.processed_or_skipped,
        purged.days,
        purged.failed
    )?;
    writeln!(
        out,
        "{verb} {} forwarding attempt(s), {} sent job(s), {} dead job(s); pending jobs are untouched",
        forwarding.attempts, forwarding.sent_jobs, forwarding.dead_jobs
    )?;
    Ok(())
}

/// The archive's rows, then forwarding's, purged.
async fn purge_all(pool: &PgPool, policy: &RetentionPolicy) -> sqlx::Result<(Purged, PurgedForwarding)> {
    let stop = CancellationToken::new();
    Ok((purge(pool, policy, &stop).await?, purge_forwarding(pool, policy, &stop).await?))
}
