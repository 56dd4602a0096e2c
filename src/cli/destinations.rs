//! `webhook-inbox destinations ...`: each destination's state and backlog,
//! pause, resume, a test event, and a backfill.

use std::io::Write;

use anyhow::Context;
use clap::{Args, Subcommand};
use sqlx::PgPool;

use super::table;
use crate::destinations::Declaration;
use crate::operations::Since;
use crate::operations::backfill::{BackfillRange, backfill};
use crate::operations::destinations;

/// The `destinations` subcommands.
#[derive(Debug, Subcommand)]
pub enum DestinationsCommand {
    /// List destinations: state, circuit, pending jobs, age of the oldest, dead jobs.
    List(ListArgs),
    /// Stop sending to a destination (for a deploy of the app): its jobs wait.
    Pause(NameArgs),
    /// Send to a destination again (paused, disabled by a 410, or its circuit open), waiting jobs first.
    Resume(NameArgs),
    /// Send a destination a signed test event now, and print its answer.
    Test(NameArgs),
    /// Enqueue a job for every applied event of a time range the destination wants (one it did
    /// not have), oldest first, after live jobs.
    Backfill(BackfillArgs),
}

/// Which destination and events to backfill.
#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// The destination's name, as declared.
    pub name: String,

    /// Events first received since then: a duration back from now (30d, 12h) or an RFC 3339 time.
    #[arg(long)]
    pub since: Since,

    /// Events first received before then (default: now).
    #[arg(long)]
    pub until: Option<Since>,

    /// Count the jobs a run would enqueue; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// How to print the list.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Which destination.
#[derive(Debug, Args)]
pub struct NameArgs {
    /// The destination's name, as declared.
    pub name: String,
}

/// Runs a `destinations` subcommand.
pub async fn run(
    pool: &PgPool,
    declaration: &Declaration,
    command: DestinationsCommand,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match command {
        DestinationsCommand::List(args) => {
            let views = destinations::list(pool, declaration).await?;
            if args.json {
                return views.iter().try_for_each(|view| super::json_line(out, view));
            }
            let lines: Vec<[String; 7]> = views
                .iter()
                .map(|view| {
                    [
                        view.name.clone(),
                        if view.declared {
                            view.state.clone()
                        } else {
                            format!("{} (not declared)", view.state)
                        },
                        view.consecutive_failures.to_string(),
                        view.pending.to_string(),
                        format!("{:.0}", view.oldest_pending_secs),
                        view.dead.to_string(),
                        view.url.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            let header =
                ["NAME", "STATE", "FAILURES IN A ROW", "PENDING", "OLDEST PENDING (S)", "DEAD", "URL"];
            Ok(table::write(out, header, &lines)?)
        }
        DestinationsCommand::Pause(NameArgs { name }) => {
            destinations::pause(pool, declaration, &name).await?;
            writeln!(out, "{name} paused: its jobs wait until `webhook-inbox destinations resume {name}`")?;
            Ok(())
        }
        DestinationsCommand::Resume(NameArgs { name }) => {
            destinations::resume(pool, declaration, &name).await?;
            writeln!(out, "{name} resumed")?;
            Ok(())
        }
        DestinationsCommand::Test(NameArgs { name }) => {
            let destination = declaration.get(&name).with_context(|| {
                format!("destination {name:?} is not declared in the configuration file (--config)")
            })?;
            let result = destinations::send_test(pool, &crate::client::build(), destination).await?;
            table::fields(
                out,
                13,
                &[
                    ("job", format!("{} (`webhook-inbox jobs show {}`)", result.job_id, result.job_id)),
                    ("event_id", result.event_id),
                    ("status", result.status.map_or("-".into(), |s| s.to_string())),
                    ("duration_ms", format!("{:.1}", result.duration_ms)),
                    ("body", table::first_line(&result.body)),
                ],
            )?;
            match result.error {
                Some(error) => anyhow::bail!("the test event was not accepted: {error}"),
                None => Ok(()),
            }
        }
        DestinationsCommand::Backfill(args) => {
            let range = BackfillRange { since: args.since, until: args.until };
            let done = backfill(pool, declaration, &args.name, range, args.dry_run).await?;
            match done.dry_run {
                true => writeln!(
                    out,
                    "{}: {} jobs would be enqueued (dry run: nothing written)",
                    done.destination, done.enqueued
                )?,
                false => writeln!(
                    out,
                    "{}: {} jobs enqueued, sent after live events",
                    done.destination, done.enqueued
                )?,
            }
            Ok(())
        }
    }
}
