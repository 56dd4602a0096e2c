//! The `webhook-inbox` command line: one binary, one subcommand per job.
//! Every subcommand uses the same database configuration (and the embedded
//! PostgreSQL default) as `serve`; output goes to stdout, logs to stderr.

mod destinations;
mod events;
mod help;
mod jobs;
mod migrate;
mod purge;
mod reconcile;
mod serve;
mod table;

use std::io::Write;
use std::path::PathBuf;

use clap::{Arg, CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing::Instrument;

use crate::config::{DatabaseConfig, EffectsConfig, LogFormat, ServeConfig};
use crate::db::Database;
use crate::destinations::{Declaration, Forwarding};
use crate::effects::billing::PriceCredits;
use crate::inbox::{MIN_POOL_SIZE, RECORDERS, RESERVED_CONNECTIONS, RoutingTable};
use crate::providers::ProviderConfig;

/// The `--help` heading of the options every subcommand takes besides the
/// database's, so that a subcommand's own options stand apart from them.
pub const GLOBAL: &str = "Every subcommand";

/// Verified, archived, exactly-once webhook intake for Paddle, Clerk and more.
#[derive(Debug, Parser)]
#[command(name = "webhook-inbox", version, about, mut_arg("db_max_connections", pool_size))]
pub struct Cli {
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text", global = true, help_heading = GLOBAL)]
    pub log_format: LogFormat,

    /// The database every subcommand uses.
    #[command(flatten)]
    pub database: DatabaseConfig,

    /// The configuration file (TOML) that declares where events are forwarded (see the README, "Forward events to your app"). Unset: no destination.
    #[arg(long = "config", env = "CONFIG_FILE", global = true, value_name = "FILE", help_heading = GLOBAL)]
    pub config: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

pub use help::GLOBAL_SUMMARY;

/// The command line as `--help` shows it: each subcommand's own options,
/// then the global ones in short (see [`help`]).
pub fn command() -> clap::Command {
    help::summarize_global_options(Cli::command())
}

/// The process's arguments, parsed as [`Cli::parse`] would, with
/// [`command`]'s help.
pub fn parse() -> Cli {
    let mut command = command();
    let mut matches = command.get_matches_mut();
    Cli::from_arg_matches_mut(&mut matches).unwrap_or_else(|error| error.format(&mut command).exit())
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Receive webhooks over HTTP (applies migrations first, unless --no-migrate).
    Serve(Box<ServeConfig<ProviderConfig>>),
    /// Find, inspect and reprocess archived deliveries.
    #[command(subcommand)]
    Events(events::EventsCommand),
    /// See, pause, resume and test the destinations events are forwarded to.
    #[command(subcommand)]
    Destinations(destinations::DestinationsCommand),
    /// Find, inspect and replay forwarding jobs.
    #[command(subcommand)]
    Jobs(jobs::JobsCommand),
    /// Delete archive rows past their retention age; the dedup table is never touched.
    Purge(purge::PurgeArgs),
    /// Read a provider's event API back and recover the events the inbox missed (see the README, "Missed events").
    Reconcile(Box<reconcile::ReconcileArgs>),
    /// Apply the database migrations and exit (then run `serve --no-migrate`).
    Migrate,
}

/// Runs the parsed command line to completion, output to stdout.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    run_with(cli, &mut std::io::stdout()).await
}

/// Runs the parsed command line to completion, output to `out`.
///
/// Every command but `serve` runs in a span with a fresh `request_id`, the
/// field HTTP requests log under, which a reprocess also stores in the
/// archive rows it writes.
pub async fn run_with(cli: Cli, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    let declaration = match &cli.config {
        Some(path) => Declaration::load(path)?,
        None => Declaration::default(),
    };
    let command = match cli.command {
        Command::Serve(config) => return serve::run(&cli.database, *config, declaration).await,
        command => command,
    };
    let request_id = uuid::Uuid::now_v7().to_string();
    let span = tracing::info_span!("command", request_id);
    async {
        let db = Database::connect(&cli.database).await?;
        let result = match command {
            Command::Serve(_) => unreachable!("handled above"),
            Command::Events(events) => events::run(&db.pool, events, &declaration, &request_id, out).await,
            Command::Destinations(command) => destinations::run(&db.pool, &declaration, command, out).await,
            Command::Jobs(command) => jobs::run(&db.pool, command, out).await,
            Command::Purge(args) => purge::run(&db.pool, args, out).await,
            Command::Reconcile(args) => reconcile::run(&db.pool, *args, &declaration, out).await,
            Command::Migrate => migrate::run(&db.pool, out).await,
        };
        db.close().await;
        result
    }
    .instrument(span)
    .await
}

/// `DB_MAX_CONNECTIONS` as the delivery workers need it: at least
/// [`MIN_POOL_SIZE`], with a help that says why.
fn pool_size(arg: Arg) -> Arg {
    arg.value_parser(clap::value_parser!(u32).range(i64::from(MIN_POOL_SIZE)..)).help(format!(
        "Most connections the pool opens (at least {MIN_POOL_SIZE}): {RECORDERS} record deliveries without \
         side effects, {RESERVED_CONNECTIONS} serve the outbox, readiness, metrics, the archive's upkeep and the admin \
         API, the rest apply deliveries with side effects"
    ))
}

/// The routing table, configured: the effects `serve` applies and `events
/// reprocess` applies again, and (for the CLI's reprocess; `serve` adds its
/// running queues) where events are forwarded. Warns when no price is
/// listed: every Paddle subscription or renewal with items then fails until
/// its prices are.
fn routing(config: &EffectsConfig, declaration: &Declaration) -> RoutingTable {
    if config.paddle_price_credits.is_empty() {
        tracing::warn!(
            "PADDLE_PRICE_CREDITS is empty: Paddle subscriptions and renewals fail (archived FAILED) until \
             their prices are listed"
        );
    }
    let routing = crate::effects::all(PriceCredits::from(config.paddle_price_credits.clone()));
    match declaration.is_empty() {
        true => routing,
        false => routing.with_destinations(std::sync::Arc::new(Forwarding::declared(declaration.clone()))),
    }
}

/// Writes `value` as one line of JSON (the `--json` output), hidden
/// characters escaped (the same JSON value, safe on a terminal).
fn json_line(out: &mut dyn Write, value: &impl serde::Serialize) -> anyhow::Result<()> {
    writeln!(out, "{}", crate::operations::display::visible_json(&serde_json::to_string(value)?))?;
    Ok(())
}
