//! Logs: `tracing` to stderr, human-readable or JSON, filtered by `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber, and a panic hook that logs through it.
/// Default filter: `info`, with sqlx's
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
    // Rust's default hook prints a panic's message to stderr, past the
    // logger and its format; the message could quote a payload. Log where,
    // not what (a panicking effect's message is kept in its FAILED row's
    // error_message).
    std::panic::set_hook(Box::new(|panic| {
        let location = panic.location().map(ToString::to_string).unwrap_or_default();
        tracing::error!(%location, "panicked");
    }));
}
