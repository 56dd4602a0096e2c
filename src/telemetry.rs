//! Logs: `tracing` to stderr, human-readable or JSON, filtered by `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Default filter: `info`, with sqlx's
/// per-statement logs off (they would print statement text on the hot path).
/// Text is coloured on a terminal only: in a file or a log collector the
/// escape codes are noise, and writing them costs every request's line.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
    }
}
