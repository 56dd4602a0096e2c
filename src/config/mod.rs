//! Configuration: command-line flags, each with an environment variable
//! fallback, parsed into plain values and nothing more. This module names
//! no other of the crate (a test keeps it a leaf): the entry point (`cli`)
//! builds the service's objects from these values. Secrets are parsed into
//! `SecretString`s, by [`secret`] alone, and never printed, not even by
//! `--help`.

mod database;
mod reconcile;
mod traces;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, FromArgMatches, ValueEnum};
use secrecy::SecretString;

pub use database::{DEFAULT_LOCK_TIMEOUT_MS, DEFAULT_STATEMENT_TIMEOUT_MS, DatabaseConfig};
pub use reconcile::{ApiConfig, ReconcileConfig};
pub use traces::{OtlpProtocol, TracesConfig};

/// How `serve` listens, verifies and applies. `P` is the providers' secret
/// flags, which the providers generate from their own list (the `cli` names
/// it), so that this module needs no provider.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "HTTP")]
pub struct ServeConfig<P: Args + FromArgMatches + Clone + std::fmt::Debug + Send + Sync + 'static> {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080")]
    pub listen_addr: SocketAddr,

    /// Largest accepted request body; larger ones are answered 413.
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Time a client gets to send the request headers, and then the body, before the connection is closed (slow clients).
    #[arg(long, env = "REQUEST_READ_TIMEOUT_SECS", default_value_t = 10)]
    pub request_read_timeout_secs: u64,

    /// Most client connections open at once; at the limit, the one waiting longest for a request head is closed to admit a new one (when every one has a request in progress, new ones wait in the listen backlog). Each may hold up to MAX_BODY_BYTES plus ~400 KiB of headers.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Each provider's secrets: `--{name}-webhook-secret` (`{NAME}_WEBHOOK_SECRET`) and `STANDARD_WEBHOOKS`.
    #[command(flatten, next_help_heading = "Providers")]
    pub providers: P,

    /// Largest accepted difference, into the past or the future, between a signature's timestamp and now.
    #[arg(long, env = "SIGNATURE_TOLERANCE_SECS", default_value_t = 300, help_heading = "Providers")]
    pub signature_tolerance_secs: u64,

    /// What the effects need.
    #[command(flatten)]
    pub effects: EffectsConfig,

    /// On SIGTERM or Ctrl-C, the bound on the whole shutdown: in-flight deliveries and queue sends (emails, forwards) get all of it but the last fifth (at most 2 s), which closes the database.
    #[arg(long, env = "SHUTDOWN_GRACE_SECS", default_value_t = 25, help_heading = "Operations")]
    pub shutdown_grace_secs: u64,

    /// Skip applying migrations at startup (run `webhook-inbox migrate` as a deploy step instead); the schema is still checked.
    #[arg(long, help_heading = "Operations")]
    pub no_migrate: bool,

    /// Bearer token of the admin API under /admin (at least 16 bytes, no surrounding whitespace). Unset or empty: /admin answers 404.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true, value_parser = secret, help_heading = "Operations")]
    pub admin_token: Option<SecretString>,

    /// The operator console at /console (on with ADMIN_TOKEN).
    #[command(flatten)]
    pub console: ConsoleConfig,

    /// Proxies whose X-Forwarded-For names the client of an operator request (admin API, console sign-in, /metrics), so that wrong tokens slow that client, not the proxy: comma-separated IP addresses. Unset or empty: the connection's peer is the client and X-Forwarded-For is ignored.
    #[arg(long, env = "TRUSTED_PROXY", value_parser = ip_list, help_heading = "Operations")]
    pub trusted_proxy: Option<IpList>,

    /// Bearer token GET /metrics requires. Unset: /metrics is open (keep it off the public internet).
    #[arg(long, env = "METRICS_TOKEN", hide_env_values = true, value_parser = secret, help_heading = "Operations")]
    pub metrics_token: Option<SecretString>,

    /// How long archive rows are kept.
    #[command(flatten)]
    pub retention: RetentionConfig,

    /// Periodic reconciliation with the providers' event APIs (off by default).
    #[command(flatten)]
    pub reconcile: ReconcileConfig,

    /// The outbox worker and its SMTP server.
    #[command(flatten)]
    pub outbox: OutboxConfig,

    /// The queue engine, which sends the emails and the forwards.
    #[command(flatten)]
    pub queues: QueueConfig,

    /// Spans exported over OTLP (off by default).
    #[command(flatten)]
    pub traces: TracesConfig,
}

/// The operator console's sessions.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Console")]
pub struct ConsoleConfig {
    /// Mark the console's session cookie Secure (browsers then send it over HTTPS only): set it when the console is reached through TLS.
    #[arg(long, env = "CONSOLE_SECURE_COOKIE")]
    pub console_secure_cookie: bool,

    /// Minutes a console session lasts from sign-in.
    #[arg(long, env = "CONSOLE_SESSION_MINUTES", default_value_t = 480, value_parser = clap::value_parser!(u64).range(1..))]
    pub console_session_minutes: u64,
}

/// How the outbox worker sends email.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Email (the outbox)")]
pub struct OutboxConfig {
    /// SMTP server: `smtp://host:2525` (plain), `smtp://user:pass@host:587?tls=required` (STARTTLS), `smtps://user:pass@host:465`. Unset or empty: the worker is off and emails wait in the outbox.
    #[arg(long, env = "SMTP_URL", hide_env_values = true, value_parser = secret)]
    pub smtp_url: Option<SecretString>,

    /// Sender of every email, e.g. `Acme <noreply@acme.example>`; the Message-ID domain too. Required with SMTP_URL.
    #[arg(long, env = "SMTP_FROM")]
    pub smtp_from: Option<String>,

    /// Longest one email may take to send, connection included, before it counts as failed.
    #[arg(long, env = "SMTP_TIMEOUT_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub smtp_timeout_secs: u64,

    /// Directory whose `welcome.subject`, `welcome.txt`, `welcome.html`, `downgrade.*` files replace the built-in templates.
    #[arg(long, env = "EMAIL_TEMPLATES_DIR")]
    pub email_templates_dir: Option<PathBuf>,

    /// Attempts per email, the first included; then the outbox row is marked dead.
    #[arg(long, env = "OUTBOX_MAX_ATTEMPTS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub outbox_max_attempts: u32,

    /// Delay before retrying a failed email; it doubles after each failure.
    #[arg(long, env = "OUTBOX_BACKOFF_BASE_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub outbox_backoff_base_secs: u64,

    /// Longest delay between two attempts.
    #[arg(long, env = "OUTBOX_BACKOFF_CAP_SECS", default_value_t = 3600)]
    pub outbox_backoff_cap_secs: u64,
}

/// `QUEUE_POLL_INTERVAL_MS` unless set (or its old name).
const DEFAULT_QUEUE_POLL_INTERVAL_MS: u64 = 1000;

/// The queue engine's settings, for every queue it runs (the outbox's
/// emails, each destination's forwards).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Queues (email and forwarding)")]
pub struct QueueConfig {
    /// How often an idle queue (emails, each destination) looks for due rows; a job this process just wrote is claimed at once. Unset: OUTBOX_POLL_INTERVAL_MS, else 1000.
    #[arg(long, env = "QUEUE_POLL_INTERVAL_MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub queue_poll_interval_ms: Option<u64>,

    /// QUEUE_POLL_INTERVAL_MS's name before the engine served the forwards too; still read, when the new name is unset.
    #[arg(long, env = "OUTBOX_POLL_INTERVAL_MS", hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub outbox_poll_interval_ms: Option<u64>,
}

impl QueueConfig {
    /// How often an idle queue looks for due rows: `QUEUE_POLL_INTERVAL_MS`,
    /// else its old name `OUTBOX_POLL_INTERVAL_MS`, else 1 s.
    pub fn poll_interval(&self) -> Duration {
        let ms = self.queue_poll_interval_ms.or(self.outbox_poll_interval_ms);
        Duration::from_millis(ms.unwrap_or(DEFAULT_QUEUE_POLL_INTERVAL_MS))
    }
}

impl<P: Args + FromArgMatches + Clone + std::fmt::Debug + Send + Sync + 'static> ServeConfig<P> {
    /// The body and header read timeout.
    pub fn request_read_timeout(&self) -> Duration {
        Duration::from_secs(self.request_read_timeout_secs)
    }
}

/// What the effects need beyond the event; shared by `serve` and
/// `events reprocess`, which run the same effects.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Effects")]
pub struct EffectsConfig {
    /// Credits per unit of each Paddle price, e.g. `pri_a=100,pri_b=500`. A subscription or renewal
    /// with a price not listed fails (archived FAILED, answered 500) until it is; `pri_c=0` grants nothing.
    #[arg(long, env = "PADDLE_PRICE_CREDITS", default_value = "", value_parser = price_credits)]
    pub paddle_price_credits: HashMap<String, i64>,
}

/// `PADDLE_PRICE_CREDITS`: comma-separated `price_id=credits` entries, the
/// credits a non-negative integer; blank entries are ignored.
pub fn price_credits(text: &str) -> Result<HashMap<String, i64>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (price, credits) =
                entry.split_once('=').ok_or_else(|| format!("expected price_id=credits, got {entry:?}"))?;
            let credits: i64 = credits
                .trim()
                .parse()
                .ok()
                .filter(|c| *c >= 0)
                .ok_or_else(|| format!("credits for {price:?} must be a non-negative integer"))?;
            Ok((price.trim().to_string(), credits))
        })
        .collect()
}

/// Retention of archive rows, which `serve` applies in the background.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Retention")]
pub struct RetentionConfig {
    /// Days PROCESSED and SKIPPED archive rows are kept before `serve` purges them; 0 turns retention off.
    #[arg(long, env = "ARCHIVE_RETENTION_DAYS", default_value_t = 90)]
    pub archive_retention_days: u32,

    /// Days FAILED archive rows are kept (at least ARCHIVE_RETENTION_DAYS); 0 keeps them forever.
    #[arg(long, env = "FAILED_RETENTION_DAYS", default_value_t = DEFAULT_FAILED_RETENTION_DAYS)]
    pub failed_retention_days: u32,
}

/// FAILED rows are kept twice as long as the others by default, so nobody
/// loses a failure before looking at it.
pub const DEFAULT_FAILED_RETENTION_DAYS: u32 = 180;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The one parser of a secret setting: takes the text as it is, and never
/// fails, so that clap never quotes the value in an error. What the secret
/// must be (a key's length, a URL) is checked where it is used, by messages
/// that do not quote it.
pub fn secret(text: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(text))
}

/// IP addresses, from a comma-separated list (empty: none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpList(pub Vec<std::net::IpAddr>);

/// Parses `TRUSTED_PROXY`: `10.0.0.1,10.0.0.2`; an empty text is no address.
pub fn ip_list(text: &str) -> Result<IpList, String> {
    let addresses = text.split(',').map(str::trim).filter(|part| !part.is_empty());
    addresses
        .map(|part| part.parse().map_err(|_| format!("{part:?} is not an IP address")))
        .collect::<Result<_, _>>()
        .map(IpList)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// The flags of the queue engine, alone.
    #[derive(Debug, Parser)]
    struct Queues {
        #[command(flatten)]
        queues: QueueConfig,
    }

    fn poll_interval(args: &[&str]) -> Duration {
        let parsed = Queues::try_parse_from(std::iter::once("test").chain(args.iter().copied())).unwrap();
        parsed.queues.poll_interval()
    }

    #[test]
    fn the_poll_interval_is_read_under_its_new_name_then_its_old_one_then_defaults() {
        assert_eq!(poll_interval(&[]), Duration::from_secs(1));
        assert_eq!(poll_interval(&["--outbox-poll-interval-ms", "50"]), Duration::from_millis(50));
        assert_eq!(poll_interval(&["--queue-poll-interval-ms", "20"]), Duration::from_millis(20));
        let both = ["--queue-poll-interval-ms", "20", "--outbox-poll-interval-ms", "50"];
        assert_eq!(poll_interval(&both), Duration::from_millis(20));
    }
}
