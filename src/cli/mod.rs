//! The `webhook-inbox` command line: one binary, one subcommand per job.

mod serve;

use clap::{Parser, Subcommand};

use crate::config::{DatabaseConfig, LogFormat, ServeConfig};

/// Verified, archived, exactly-once webhook intake for Paddle, Clerk and more.
#[derive(Debug, Parser)]
#[command(name = "webhook-inbox", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,

    /// The database every subcommand uses.
    #[command(flatten)]
    pub database: DatabaseConfig,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Receive webhooks over HTTP (applies migrations first).
    Serve(ServeConfig),
}

/// Runs the parsed command line to completion.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(config) => serve::run(&cli.database, config).await,
    }
}
