//! `webhook-inbox events ...`: find, inspect and reprocess archived deliveries.

mod list;
mod reprocess;
mod show;

use std::io::Write;

use clap::Subcommand;
use sqlx::PgPool;

use super::json_line;
use crate::destinations::Declaration;

/// The `events` subcommands.
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// List archived deliveries, newest first.
    List(list::ListArgs),
    /// Show one archived delivery: every column, the payload, and the other deliveries of its event.
    Show(show::ShowArgs),
    /// Run stored deliveries again through the same transaction as a live delivery.
    Reprocess(reprocess::ReprocessArgs),
}

/// Runs an `events` subcommand.
/// `declaration` says where a reprocessed event that is applied now is
/// forwarded (the jobs are sent by `serve`).
pub async fn run(
    pool: &PgPool,
    command: EventsCommand,
    declaration: &Declaration,
    request_id: &str,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match command {
        EventsCommand::List(args) => list::run(pool, args, out).await,
        EventsCommand::Show(args) => show::run(pool, args, out).await,
        EventsCommand::Reprocess(args) => reprocess::run(pool, args, declaration, request_id, out).await,
    }
}
