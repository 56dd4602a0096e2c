//! Entry point: parse flags, start logging, run the subcommand.

use clap::Parser;
use webhook_inbox::cli::{self, Cli};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    webhook_inbox::telemetry::init(cli.log_format);
    cli::run(cli).await
}
