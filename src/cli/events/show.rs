//! `webhook-inbox events show <archive id>`.

use std::io::Write;

use anyhow::Context;
use clap::Args;
use sqlx::PgPool;

use super::json_line;
use crate::cli::table;
use crate::operations::{display, query};

/// Which row, and how to print it.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The archive id (the first column of `events list`).
    pub id: i64,

    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Prints every column of the row, its payload pretty-printed, and the other
/// deliveries of its event.
pub async fn run(pool: &PgPool, args: ShowArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let shown =
        query::show(pool, args.id).await?.with_context(|| format!("archived event {} not found", args.id))?;
    if args.json {
        return json_line(out, &shown);
    }
    let (event, row) = (&shown.event, &shown.event.summary);
    let optional = |value: Option<String>| value.unwrap_or_else(|| "-".into());
    let fields = [
        ("id", row.id.to_string()),
        ("provider", row.provider.clone()),
        ("event_id", row.event_id.clone()),
        ("event_type", row.event_type.clone()),
        ("processing_status", row.processing_status.clone()),
        ("error_message", optional(row.error_message.clone())),
        ("reprocess_of", optional(row.reprocess_of.map(|id| id.to_string()))),
        ("occurred_at", optional(row.occurred_at.map(table::time))),
        ("created_at", table::time(row.created_at)),
        ("processed_at", optional(row.processed_at.map(table::time))),
        ("source", event.source.clone()),
        ("notification_id", optional(event.notification_id.clone())),
        ("request_id", optional(event.request_id.clone())),
        ("secret_index", optional(event.secret_index.map(|i| i.to_string()))),
        ("signature", optional(event.signature.clone())),
        (
            "event applied",
            event.event_applied_at.map_or_else(|| "no".into(), |at| format!("yes, {}", table::time(at))),
        ),
    ];
    table::fields(out, 18, &fields)?;
    writeln!(out, "payload:\n{}", display::visible_json(&serde_json::to_string_pretty(&event.payload)?))?;
    if shown.other_deliveries.is_empty() {
        writeln!(out, "\nNo other delivery of this event is archived.")?;
    } else {
        writeln!(out, "\nOther deliveries of this event:")?;
        table::deliveries(out, &shown.other_deliveries)?;
    }
    Ok(())
}
