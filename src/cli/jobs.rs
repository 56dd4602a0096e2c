//! `webhook-inbox jobs ...`: forwarding jobs, their attempts, and replays.

use std::io::Write;

use anyhow::Context;
use clap::{Args, Subcommand};
use sqlx::PgPool;

use super::table;
use crate::operations::Since;
use crate::operations::filter::FilterValue;
use crate::operations::jobs::{self, JobFilter, JobSummary};

/// The `jobs` subcommands.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs, newest first.
    List(ListArgs),
    /// Show one job and every attempt.
    Show(ShowArgs),
    /// Send a job again (same webhook-id), or every dead job of a destination in a time range.
    Replay(ReplayArgs),
}

/// Which jobs, how many, how to print them.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Conditions on the jobs.
    #[command(flatten)]
    pub filter: JobFilter,

    /// Most jobs shown.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,

    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Which job.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The job's id (the first column of `jobs list`).
    pub id: i64,

    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One job, or the dead jobs of a destination.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The job's id; or leave it out and name --destination.
    #[arg(required_unless_present = "destination", conflicts_with = "destination")]
    pub id: Option<i64>,

    /// Replay every dead job of this destination (in the range given by --since and --until).
    #[arg(long)]
    pub destination: Option<FilterValue>,

    /// Only jobs created since then (30m, 2h, 1d, or an RFC 3339 time).
    #[arg(long, requires = "destination")]
    pub since: Option<Since>,

    /// Only jobs created before then (a duration back from now, or an RFC 3339 time).
    #[arg(long, requires = "destination")]
    pub until: Option<Since>,

    /// Most jobs replayed.
    #[arg(long, default_value_t = 1000, requires = "destination")]
    pub limit: u32,

    /// List what would be replayed; change nothing.
    #[arg(long, requires = "destination")]
    pub dry_run: bool,
}

/// Runs a `jobs` subcommand.
pub async fn run(pool: &PgPool, command: JobsCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        JobsCommand::List(args) => {
            let rows = jobs::list(pool, &args.filter, args.limit, None).await?;
            match args.json {
                true => rows.iter().try_for_each(|row| super::json_line(out, row)),
                false => Ok(write_jobs(out, &rows)?),
            }
        }
        JobsCommand::Show(args) => {
            let detail =
                jobs::show(pool, args.id).await?.with_context(|| format!("job {} not found", args.id))?;
            if args.json {
                return super::json_line(out, &detail);
            }
            let job = &detail.job;
            let optional = |value: Option<String>| value.unwrap_or_else(|| "-".into());
            let fields = [
                ("id", job.id.to_string()),
                ("destination", job.destination.clone()),
                ("origin", job.origin().into()),
                ("provider", job.provider.clone()),
                ("event_id", job.event_id.clone()),
                ("event_type", job.event_type.clone()),
                ("status", job.status.clone()),
                ("attempts", job.attempts.to_string()),
                ("last_error", optional(job.last_error.clone())),
                ("next_attempt_at", table::time(job.next_attempt_at)),
                ("ordering_key", optional(job.ordering_key.clone())),
                ("created_at", table::time(job.created_at)),
                ("sent_at", optional(job.sent_at.map(table::time))),
                ("webhook-id", detail.webhook_id.clone()),
                ("body", format!("{} bytes (the provider's, as received)", detail.body_bytes)),
            ];
            table::fields(out, 16, &fields)?;
            writeln!(out, "\nAttempts:")?;
            let lines: Vec<[String; 6]> = detail
                .attempts_made
                .iter()
                .map(|a| {
                    [
                        a.attempt.to_string(),
                        table::time(a.attempted_at),
                        format!("{:.1}", a.duration_ms),
                        a.status_code.map_or("-".into(), |s| s.to_string()),
                        a.error.as_deref().map(table::cell).unwrap_or_default(),
                        table::cell(&a.response_body),
                    ]
                })
                .collect();
            Ok(table::write(out, ["#", "AT (UTC)", "MS", "STATUS", "ERROR", "RESPONSE"], &lines)?)
        }
        JobsCommand::Replay(args) => match (args.id, args.destination) {
            (Some(id), _) => {
                let job = jobs::replay(pool, id).await?;
                writeln!(out, "job {} replayed: pending, sent again with the same webhook-id", job.id)?;
                Ok(())
            }
            (None, Some(destination)) => {
                let replayed =
                    jobs::replay_dead(pool, &destination, args.since, args.until, args.limit, args.dry_run)
                        .await?;
                write_jobs(out, &replayed)?;
                let verb = if args.dry_run { "would be replayed (dry run)" } else { "replayed" };
                writeln!(out, "{} dead job(s) of {destination} {verb}", replayed.len())?;
                Ok(())
            }
            (None, None) => unreachable!("clap requires an id or --destination"),
        },
    }
}

fn write_jobs(out: &mut dyn Write, rows: &[JobSummary]) -> std::io::Result<()> {
    let lines: Vec<[String; 9]> = rows
        .iter()
        .map(|job| {
            [
                job.id.to_string(),
                table::time(job.created_at),
                job.destination.clone(),
                job.origin().into(),
                job.status.clone(),
                job.attempts.to_string(),
                table::cell(&job.provider),
                table::cell(&job.event_id),
                job.last_error.as_deref().map(table::cell).unwrap_or_default(),
            ]
        })
        .collect();
    let header = [
        "ID",
        "CREATED (UTC)",
        "DESTINATION",
        "ORIGIN",
        "STATUS",
        "ATTEMPTS",
        "PROVIDER",
        "EVENT ID",
        "LAST ERROR",
    ];
    table::write(out, header, &lines)
}
