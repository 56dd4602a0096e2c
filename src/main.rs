//! Entry point: parse flags, start logging, run the subcommand.

use webhook_inbox::cli;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A `.env` in the working directory, if any, fills in unset variables.
    dotenvy::dotenv().ok();
    let cli = cli::parse();
    webhook_inbox::telemetry::init(cli.log_format);
    cli::run(cli).await
}
