//! Logs: `tracing` to stderr, human-readable or JSON, filtered by `RUST_LOG`;
//! and, when an OTLP endpoint is set, the same spans exported as traces
//! ([`export`]), whose context crosses process boundaries ([`context`]).

pub mod context;
mod export;

use std::io::IsTerminal;

use tracing_subscriber::layer::{Layered, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::config::{LogFormat, TracesConfig};

pub use export::Traces;

/// What every layer is stacked on: the filter decides once, for all of them.
type Filtered = Layered<EnvFilter, Registry>;

/// Installs the global subscriber, and a panic hook that logs through it;
/// with `traces` naming an endpoint, spans are exported there too (the
/// returned [`Traces`] flushes them at the end).
/// Default filter: `info`, with sqlx's
/// per-statement logs off (they would print statement text on the hot path).
/// Text is coloured on a terminal only: in a file or a log collector the
/// escape codes are noise, and writing them costs every request's line.
pub fn init(format: LogFormat, traces: Option<&TracesConfig>) -> anyhow::Result<Traces> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let mut layers: Vec<Box<dyn Layer<Filtered> + Send + Sync>> = vec![match format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs.json().flatten_event(true).with_current_span(true).boxed(),
    }];
    let traces = Traces::start(traces)?;
    // Unset, no layer at all: spans cost what they cost without traces.
    if let Some(tracer) = traces.tracer() {
        layers.push(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                // Where in the source and on which thread are noise in a
                // trace, and timing idle time costs two clock reads per poll.
                .with_location(false)
                .with_threads(false)
                .with_tracked_inactivity(false)
                .boxed(),
        );
    }
    tracing_subscriber::registry().with(filter).with(layers).init();
    // Rust's default hook prints a panic's message to stderr, past the
    // logger and its format; the message could quote a payload. Log where,
    // not what (a panicking effect's message is kept in its FAILED row's
    // error_message).
    std::panic::set_hook(Box::new(|panic| {
        let location = panic.location().map(ToString::to_string).unwrap_or_default();
        tracing::error!(%location, "panicked");
    }));
    Ok(traces)
}
