//! Entry point: parse flags, start logging (and traces, for `serve`), run
//! the subcommand, then send the last spans.

use webhook_inbox::cli::{self, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A `.env` in the working directory, if any, fills in unset variables.
    dotenvy::dotenv().ok();
    let cli = cli::parse();
    let traces = match &cli.command {
        Command::Serve(config) => Some(&config.traces),
        _ => None,
    };
    let traces = webhook_inbox::telemetry::init(cli.log_format, traces)?;
    let result = cli::run(cli).await;
    traces.shutdown().await;
    result
}
