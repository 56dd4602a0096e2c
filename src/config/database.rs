//! Where the database is and how the pool uses it: the flags every
//! subcommand shares.

use std::path::PathBuf;

use clap::Args;
use secrecy::SecretString;

use super::secret;

/// `LOCK_TIMEOUT_MS` unless set.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 3000;

/// `STATEMENT_TIMEOUT_MS` unless set.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 30_000;

/// Where the database is and how the pool uses it. Shared by every subcommand.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Database (every subcommand)")]
pub struct DatabaseConfig {
    /// PostgreSQL URL. Unset: an embedded PostgreSQL under --data-dir, started and stopped by this process.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_parser = secret, global = true)]
    pub database_url: Option<SecretString>,

    /// Directory of the embedded PostgreSQL cluster (used only without DATABASE_URL).
    #[arg(long, env = "DATA_DIR", default_value = ".webhook-inbox", global = true)]
    pub data_dir: PathBuf,

    /// Most connections the pool opens. Its floor and the help that explains
    /// it come from the delivery workers' numbers, which the entry point adds.
    #[arg(long, env = "DB_MAX_CONNECTIONS", default_value_t = 16, global = true)]
    pub db_max_connections: u32,

    /// How long a delivery waits for a free delivery worker (or a pooled connection) before answering 503.
    #[arg(long, env = "DB_ACQUIRE_TIMEOUT_MS", default_value_t = 3000, global = true)]
    pub db_acquire_timeout_ms: u64,

    /// How long a delivery waits behind a concurrent delivery of the same event (PostgreSQL lock_timeout) before answering 503.
    #[arg(long, env = "LOCK_TIMEOUT_MS", default_value_t = DEFAULT_LOCK_TIMEOUT_MS, global = true)]
    pub lock_timeout_ms: u64,

    /// Longest any one statement may run (PostgreSQL statement_timeout); a delivery past it answers 503.
    #[arg(long, env = "STATEMENT_TIMEOUT_MS", default_value_t = DEFAULT_STATEMENT_TIMEOUT_MS, global = true)]
    pub statement_timeout_ms: u64,

    /// Silence on a TCP connection to the database before the first keepalive probe.
    #[arg(long, env = "DB_KEEPALIVE_IDLE_SECS", default_value_t = 10, global = true,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub db_keepalive_idle_secs: u64,

    /// Time between unanswered keepalive probes.
    #[arg(long, env = "DB_KEEPALIVE_INTERVAL_SECS", default_value_t = 5, global = true,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub db_keepalive_interval_secs: u64,

    /// Unanswered keepalive probes after which a database connection is dropped (and unacknowledged data waits no longer than idle + interval × count).
    #[arg(long, env = "DB_KEEPALIVE_COUNT", default_value_t = 3, global = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub db_keepalive_count: u32,
}
