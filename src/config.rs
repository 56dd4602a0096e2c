//! Configuration: command-line flags, each with an environment variable
//! fallback. Secrets are parsed into `SecretString`s and never printed, not
//! even by `--help`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, ValueEnum};
use secrecy::SecretString;

use crate::handlers::Handlers;
use crate::handlers::billing::PriceCredits;
use crate::operations::{Age, RetentionPolicy};
use crate::providers::ProviderConfig;
use crate::queue::Schedule;

/// Where the database is and how the pool uses it. Shared by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct DatabaseConfig {
    /// PostgreSQL URL. Unset: an embedded PostgreSQL under --data-dir, started and stopped by this process.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_parser = parse_secret, global = true)]
    pub database_url: Option<SecretString>,

    /// Directory of the embedded PostgreSQL cluster (used only without DATABASE_URL).
    #[arg(long, env = "DATA_DIR", default_value = ".webhook-inbox", global = true)]
    pub data_dir: PathBuf,

    /// Most connections the pool opens (at least 6): 2 record deliveries without side effects, 3 serve the outbox, readiness, metrics, retention and the admin API, the rest apply deliveries with side effects.
    #[arg(long, env = "DB_MAX_CONNECTIONS", default_value_t = 16, global = true,
          value_parser = clap::value_parser!(u32).range(6..))]
    pub db_max_connections: u32,

    /// How long a delivery waits for a free delivery worker (or a pooled connection) before answering 503.
    #[arg(long, env = "DB_ACQUIRE_TIMEOUT_MS", default_value_t = 3000, global = true)]
    pub db_acquire_timeout_ms: u64,

    /// How long a delivery waits behind a concurrent delivery of the same event (PostgreSQL lock_timeout) before answering 503.
    #[arg(long, env = "LOCK_TIMEOUT_MS", default_value_t = 3000, global = true)]
    pub lock_timeout_ms: u64,

    /// Longest any one statement may run (PostgreSQL statement_timeout); a delivery past it answers 503.
    #[arg(long, env = "STATEMENT_TIMEOUT_MS", default_value_t = 30_000, global = true)]
    pub statement_timeout_ms: u64,
}

impl DatabaseConfig {
    /// The session settings every connection gets.
    pub fn session(&self) -> crate::db::Session {
        crate::db::Session {
            lock_timeout: Duration::from_millis(self.lock_timeout_ms),
            statement_timeout: Duration::from_millis(self.statement_timeout_ms),
        }
    }
}

/// How `serve` listens, verifies and applies.
#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// Address to listen on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080")]
    pub listen_addr: SocketAddr,

    /// Each provider's secrets: `--{name}-webhook-secret` (`{NAME}_WEBHOOK_SECRET`) and `STANDARD_WEBHOOKS`.
    #[command(flatten)]
    pub providers: ProviderConfig,

    /// Largest accepted difference, into the past or the future, between a signature's timestamp and now.
    #[arg(long, env = "SIGNATURE_TOLERANCE_SECS", default_value_t = 300)]
    pub signature_tolerance_secs: u64,

    /// Largest accepted request body; larger ones are answered 413.
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Time a client gets to send the request headers, and then the body, before the connection is closed (slow clients).
    #[arg(long, env = "REQUEST_READ_TIMEOUT_SECS", default_value_t = 10)]
    pub request_read_timeout_secs: u64,

    /// What the event handlers need.
    #[command(flatten)]
    pub handlers: HandlersConfig,

    /// On SIGTERM or Ctrl-C, the bound on the whole shutdown: in-flight deliveries and email sends get all of it but the last fifth (at most 2 s), which closes the database.
    #[arg(long, env = "SHUTDOWN_GRACE_SECS", default_value_t = 25)]
    pub shutdown_grace_secs: u64,

    /// Skip applying migrations at startup (run `webhook-inbox migrate` as a deploy step instead); the schema is still checked.
    #[arg(long)]
    pub no_migrate: bool,

    /// Bearer token of the admin API under /admin (at least 16 bytes, no surrounding whitespace). Unset or empty: /admin answers 404.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true, value_parser = parse_secret)]
    pub admin_token: Option<SecretString>,

    /// The operator console at /console (on with ADMIN_TOKEN).
    #[command(flatten)]
    pub console: ConsoleConfig,

    /// Bearer token GET /metrics requires. Unset: /metrics is open (keep it off the public internet).
    #[arg(long, env = "METRICS_TOKEN", hide_env_values = true, value_parser = parse_secret)]
    pub metrics_token: Option<SecretString>,

    /// How long archive rows are kept.
    #[command(flatten)]
    pub retention: RetentionConfig,

    /// The outbox worker and its SMTP server.
    #[command(flatten)]
    pub outbox: OutboxConfig,
}

/// The operator console's sessions.
#[derive(Debug, Clone, Args)]
pub struct ConsoleConfig {
    /// Mark the console's session cookie Secure (browsers then send it over HTTPS only): set it when the console is reached through TLS.
    #[arg(long, env = "CONSOLE_SECURE_COOKIE")]
    pub console_secure_cookie: bool,

    /// Minutes a console session lasts from sign-in.
    #[arg(long, env = "CONSOLE_SESSION_MINUTES", default_value_t = 480, value_parser = clap::value_parser!(u64).range(1..))]
    pub console_session_minutes: u64,
}

impl ConsoleConfig {
    /// The settings the HTTP layer takes.
    pub fn settings(&self) -> crate::http::ConsoleSettings {
        crate::http::ConsoleSettings {
            secure_cookie: self.console_secure_cookie,
            session_ttl: Duration::from_secs(self.console_session_minutes * 60),
        }
    }
}

/// How the outbox worker sends email.
#[derive(Debug, Clone, Args)]
pub struct OutboxConfig {
    /// SMTP server: `smtp://host:2525` (plain), `smtp://user:pass@host:587?tls=required` (STARTTLS), `smtps://user:pass@host:465`. Unset or empty: the worker is off and emails wait in the outbox.
    #[arg(long, env = "SMTP_URL", hide_env_values = true, value_parser = parse_secret)]
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

    /// How often an idle worker looks for due emails.
    #[arg(long, env = "OUTBOX_POLL_INTERVAL_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub outbox_poll_interval_ms: u64,
}

impl OutboxConfig {
    /// When a failed email is tried again, and when it is given up.
    pub fn schedule(&self) -> Schedule {
        Schedule::doubling(
            self.outbox_max_attempts,
            Duration::from_secs(self.outbox_backoff_base_secs),
            Duration::from_secs(self.outbox_backoff_cap_secs),
        )
    }
}

impl ServeConfig {
    /// The body and header read timeout.
    pub fn request_read_timeout(&self) -> Duration {
        Duration::from_secs(self.request_read_timeout_secs)
    }
}

/// What the event handlers need beyond the event; shared by `serve` and
/// `events reprocess`, which run the same handlers.
#[derive(Debug, Clone, Args)]
pub struct HandlersConfig {
    /// Credits per unit of each Paddle price, e.g. `pri_a=100,pri_b=500`.
    #[arg(long, env = "PADDLE_PRICE_CREDITS", default_value = "")]
    pub paddle_price_credits: PriceCredits,
}

impl HandlersConfig {
    /// The handlers, configured. Warns when no price grants credits: an
    /// event applied then (reprocessed ones too) is never credited later.
    pub fn handlers(&self) -> Handlers {
        if self.paddle_price_credits.is_empty() {
            tracing::warn!("PADDLE_PRICE_CREDITS is empty: Paddle events applied now grant no credits");
        }
        Handlers { price_credits: self.paddle_price_credits.clone() }
    }
}

/// Retention of archive rows, which `serve` applies in the background.
#[derive(Debug, Clone, Args)]
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

impl RetentionConfig {
    /// The policy, or `None` when retention is off.
    pub fn policy(&self) -> anyhow::Result<Option<RetentionPolicy>> {
        if self.archive_retention_days == 0 {
            return Ok(None);
        }
        let policy = RetentionPolicy::new(
            Age::days(self.archive_retention_days),
            Some(Age::days(self.failed_retention_days)),
        )?;
        Ok(Some(policy))
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A comma-separated list of secrets; empty entries are ignored.
#[derive(Clone, Default)]
pub struct SecretList(pub Vec<SecretString>);

impl FromStr for SecretList {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(SecretList(
            text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(SecretString::from).collect(),
        ))
    }
}

impl std::fmt::Debug for SecretList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[REDACTED; {}]", self.0.len())
    }
}

fn parse_secret(text: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[test]
    fn secret_lists_split_on_commas_and_never_debug_print() {
        let list: SecretList = " a , ,b,".parse().unwrap();
        let exposed: Vec<&str> = list.0.iter().map(|s| s.expose_secret()).collect();
        assert_eq!(exposed, ["a", "b"]);
        assert_eq!(format!("{list:?}"), "[REDACTED; 2]");
    }
}
