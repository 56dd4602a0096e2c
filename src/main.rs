//! Entry point: parse flags, start logging, run the subcommand.

use webhook_inbox::cli;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A `.env` in the working directory, if any, fills in unset variables.
    dotenvy::dotenv().ok();
    let cli = cli::parse();
    webhook_inbox::telemetry::init(cli.log_format);
    // Rust's default hook prints a panic's message to stderr, past the
    // logger; a message could quote a payload. Log where, not what (a
    // panicking effect's message is kept in its FAILED row's error_message).
    std::panic::set_hook(Box::new(|panic| {
        let location = panic.location().map(ToString::to_string).unwrap_or_default();
        tracing::error!(%location, "panicked");
    }));
    cli::run(cli).await
}
