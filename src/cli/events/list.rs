//! `webhook-inbox events list`.

use std::io::Write;

use clap::Args;
use sqlx::PgPool;

use super::json_line;
use crate::cli::table;
use crate::operations::{EventFilter, query};

/// Which rows, how many, and how to print them.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Most rows shown.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,

    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Conditions on the rows.
    #[command(flatten)]
    pub filter: EventFilter,
}

/// Prints the matching rows, newest first.
pub async fn run(pool: &PgPool, args: ListArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let rows = query::list(pool, &args.filter, args.limit, None).await?;
    if args.json {
        rows.iter().try_for_each(|row| json_line(out, row))
    } else {
        Ok(table::deliveries(out, &rows)?)
    }
}
