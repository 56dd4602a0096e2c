//! `webhook-inbox reconcile <provider> [--since 3d|TIME] [--dry-run] [--json]`.

use std::io::Write;

use anyhow::bail;
use clap::Args;
use sqlx::PgPool;

use super::json_line;
use crate::client;
use crate::config::{ApiConfig, EffectsConfig};
use crate::destinations::Declaration;
use crate::operations::Since;
use crate::operations::display::visible;
use crate::providers::{self, StandardSenders};
use crate::reconcile::{self, Gap, Log, LogError, Options, Summary};

/// What to reconcile, from when.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The provider (its help lists those read from their APIs: `PROVIDERS`).
    #[arg(help = provider_help())]
    pub provider: String,

    /// Read from this time (`3d`, `12h`, or an RFC 3339 time) instead of where the last run ended.
    #[arg(long)]
    pub since: Option<Since>,

    /// Read and compare only: write nothing (no event, no mark, no run recorded).
    #[arg(long)]
    pub dry_run: bool,

    /// The summary as one JSON object.
    #[arg(long)]
    pub json: bool,

    /// The providers' API keys and URLs.
    #[command(flatten)]
    pub api: ApiConfig,

    /// The effects' configuration: recovered events get the same effects as in `serve`.
    #[command(flatten)]
    pub effects: EffectsConfig,

    /// The Standard Webhooks senders, as `serve` reads them: only their names are used, to know a sender (which gets its gap) from a name that is no provider.
    #[arg(
        long,
        env = "STANDARD_WEBHOOKS",
        hide_env_values = true,
        value_name = "NAME=SECRET,...",
        help_heading = "Providers"
    )]
    pub standard_webhooks: Option<StandardSenders>,
}

/// The provider argument's help, naming [`reconcile::PROVIDERS`].
fn provider_help() -> String {
    format!(
        "The provider: {} (read from their APIs); clerk or a Standard Webhooks sender (STANDARD_WEBHOOKS) prints the time since its last verified delivery.",
        reconcile::PROVIDERS.join(", ")
    )
}

/// Runs one reconciliation and prints its summary; fails if an event
/// failed (archived FAILED) or was unreadable, so that scripts notice.
pub async fn run(
    pool: &PgPool,
    args: ReconcileArgs,
    declaration: &Declaration,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let log = match Log::configure(&args.api, &args.provider, client::build()) {
        Ok(log) => log,
        Err(LogError::NoLog(_)) => {
            known_provider(&args)?;
            return gap(pool, &args, out).await;
        }
        Err(error) => return Err(error.into()),
    };
    let routing = super::routing(&args.effects, declaration);
    let options = Options { since: args.since.map(|Since(at)| at), dry_run: args.dry_run };
    let summary = log.reconcile(pool, &routing, &options).await?;
    match args.json {
        true => json_line(out, &summary)?,
        false => text(out, &summary)?,
    }
    if summary.failed > 0 {
        bail!("{} event(s) failed: see the FAILED lines (--json: `failures`)", summary.failed);
    }
    if summary.unreadable > 0 {
        bail!(
            "{} event(s) unreadable, left alone: see the UNREADABLE lines and the log (--json: `unreadable_events`)",
            summary.unreadable
        );
    }
    Ok(())
}

fn text(out: &mut dyn Write, s: &Summary) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} page(s), {} event(s) seen ({} repeated, {} before --since), {} already recorded, {} recovered, \
         {} redelivery requested, {} failed, {} unreadable, took {} ms",
        s.provider,
        s.pages,
        s.seen,
        s.repeated,
        s.before_since,
        s.already_recorded,
        s.recovered,
        s.redelivery_requested,
        s.failed,
        s.unreadable,
        s.took_ms
    )?;
    if s.dry_run {
        writeln!(
            out,
            "dry run: {} event(s) missing from the inbox; nothing written, nothing asked of the provider",
            s.missing
        )?;
    }
    for failure in &s.failures {
        let archived = failure.archive_id.map(|id| format!(" -> #{id}")).unwrap_or_default();
        writeln!(out, "FAILED {}{archived}: {}", visible(&failure.event_id), visible(&failure.error))?;
    }
    for unreadable in &s.unreadable_events {
        writeln!(out, "UNREADABLE {}: {}", visible(&unreadable.event_id), visible(&unreadable.error))?;
    }
    Ok(())
}

/// Refuses a name that is no provider, naming those that are (the built-in
/// ones and the configured Standard Webhooks senders): a typo would
/// otherwise get a gap report, "no verified delivery", as if a provider
/// had been silent.
fn known_provider(args: &ReconcileArgs) -> anyhow::Result<()> {
    let senders =
        args.standard_webhooks.as_ref().map(StandardSenders::by_name).transpose()?.unwrap_or_default();
    let built_in = providers::BUILT_IN.iter().map(|spec| spec.name);
    let names: Vec<&str> = built_in.chain(senders.iter().map(|(name, _)| *name)).collect();
    if !names.contains(&args.provider.as_str()) {
        bail!(
            "{} is not a provider: reconcile one of {} (a Standard Webhooks sender is named in STANDARD_WEBHOOKS)",
            visible(&args.provider),
            names.join(", ")
        );
    }
    Ok(())
}

/// For a provider without an event API: how long it has been silent.
async fn gap(pool: &PgPool, args: &ReconcileArgs, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    let gap = reconcile::gap(pool, &args.provider).await?;
    if args.json {
        return json_line(out, &gap);
    }
    let Gap { provider, last_verified_delivery_at, gap_secs } = &gap;
    let provider = visible(provider);
    match (last_verified_delivery_at, gap_secs) {
        (Some(at), Some(secs)) => writeln!(
            out,
            "{provider}: no event API to read; last verified delivery {} ({}h{:02}m ago)",
            super::table::time(*at),
            secs / 3600,
            secs % 3600 / 60
        )?,
        _ => writeln!(out, "{provider}: no event API to read; no verified delivery in the archive")?,
    }
    writeln!(
        out,
        "Events sent during a longer outage must be recovered from the provider (README \"Missed events\")."
    )?;
    Ok(())
}
