//! `webhook-inbox events reprocess <archive id>` and
//! `webhook-inbox events reprocess --status FAILED --since 1d [...]`.

use std::io::Write;

use anyhow::{Context, bail, ensure};
use clap::Args;
use serde_json::json;
use sqlx::PgPool;

use crate::destinations::Declaration;

use super::json_line;
use crate::cli::table;
use crate::config::EffectsConfig;
use crate::inbox::RoutingTable;
use crate::operations::display::visible;
use crate::operations::{EventFilter, Reprocessed, Summary, query, reprocess};

/// One row by id, or every unapplied event matching filters.
#[derive(Debug, Args)]
pub struct ReprocessArgs {
    /// The archive id to reprocess. Without it, filters select a bulk run.
    pub id: Option<i64>,

    /// Bulk: most events reprocessed.
    #[arg(long)]
    pub limit: Option<u32>,

    /// Print what would be reprocessed; write nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,

    /// Bulk: the rows whose events to reprocess (events applied since are left out).
    #[command(flatten)]
    pub filter: EventFilter,

    /// The effects' configuration: reprocessing applies the same effects as `serve`.
    #[command(flatten)]
    pub effects: EffectsConfig,
}

/// Reprocesses and prints each result; fails if an event failed again, so
/// that scripts notice.
pub async fn run(
    pool: &PgPool,
    args: ReprocessArgs,
    declaration: &Declaration,
    request_id: &str,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let routing = crate::cli::routing(&args.effects, declaration);
    let summary = match args.id {
        Some(id) => {
            ensure!(
                args.filter.is_empty() && args.limit.is_none(),
                "give an archive id or filters, not both"
            );
            one(pool, &routing, &args, id, request_id, out).await?
        }
        None => {
            ensure!(
                !args.filter.is_empty(),
                "give an archive id, or filters for a bulk run (e.g. --status FAILED --since 1d)"
            );
            matching(pool, &routing, &args, request_id, out).await?
        }
    };
    if summary.failed > 0 {
        bail!("{} event(s) failed again: see their error_message", summary.failed);
    }
    Ok(())
}

async fn one(
    pool: &PgPool,
    routing: &RoutingTable,
    args: &ReprocessArgs,
    id: i64,
    request_id: &str,
    out: &mut dyn Write,
) -> anyhow::Result<Summary> {
    let mut summary = Summary::default();
    if args.dry_run {
        let shown = query::show(pool, id).await?.with_context(|| format!("archived event {id} not found"))?;
        let event = &shown.event;
        if args.json {
            json_line(out, event)?;
        } else {
            let row = &event.summary;
            let fate = match event.event_applied_at {
                Some(_) => "already applied: would be recorded SKIPPED, changing nothing",
                // "handler": the dry run's wording since the first release, kept for scripts that read it.
                None => "not applied: would run its handler",
            };
            writeln!(
                out,
                "would reprocess #{} ({} {} {}): {fate}",
                row.id,
                visible(&row.provider),
                visible(&row.event_id),
                visible(&row.event_type)
            )?;
        }
        return Ok(summary);
    }
    let reprocessed = reprocess::reprocess(pool, routing, id, Some(request_id)).await?;
    summary.add(&reprocessed);
    print(out, args.json, None, &reprocessed)?;
    Ok(summary)
}

async fn matching(
    pool: &PgPool,
    routing: &RoutingTable,
    args: &ReprocessArgs,
    request_id: &str,
    out: &mut dyn Write,
) -> anyhow::Result<Summary> {
    let targets = query::reprocessable(pool, &args.filter, args.limit).await?;
    let mut summary = Summary::default();
    if args.dry_run {
        if args.json {
            targets.iter().try_for_each(|target| json_line(out, target))?;
        } else {
            table::deliveries(out, &targets)?;
            writeln!(out, "{} event(s) would be reprocessed (dry run: nothing written)", targets.len())?;
        }
        return Ok(summary);
    }
    if !args.json {
        writeln!(out, "{} event(s) to reprocess", targets.len())?;
    }
    for (done, target) in targets.iter().enumerate() {
        let reprocessed =
            reprocess::reprocess(pool, routing, target.id, Some(request_id)).await.with_context(|| {
                format!("stopped at archived event {} ({} of {})", target.id, done + 1, targets.len())
            })?;
        summary.add(&reprocessed);
        print(out, args.json, Some((done + 1, targets.len())), &reprocessed)?;
    }
    if args.json {
        json_line(out, &json!({ "summary": summary }))?;
    } else {
        writeln!(
            out,
            "done: {} processed, {} skipped (already applied), {} failed",
            summary.processed, summary.skipped, summary.failed
        )?;
    }
    Ok(summary)
}

/// One result: a JSON line, or `[n/total] #id provider event_id -> #new STATUS[: error]`.
fn print(
    out: &mut dyn Write,
    json: bool,
    progress: Option<(usize, usize)>,
    reprocessed: &Reprocessed,
) -> anyhow::Result<()> {
    if json {
        return json_line(out, reprocessed);
    }
    let Reprocessed { reprocess_of, archive_id, provider, event_id, status, error } = reprocessed;
    if let Some((done, total)) = progress {
        write!(out, "[{done}/{total}] ")?;
    }
    let (provider, event_id) = (visible(provider), visible(event_id));
    write!(out, "#{reprocess_of} {provider} {event_id} -> #{archive_id} {status}")?;
    match error {
        Some(error) => writeln!(out, ": {}", visible(error))?,
        None => writeln!(out)?,
    }
    Ok(())
}
