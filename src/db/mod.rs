//! The database: migrations, the connection pool and the embedded PostgreSQL default.

pub mod embedded;

use std::time::Duration;

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::config::DatabaseConfig;

/// The schema migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

/// The pool, and the embedded server behind it when there is one.
pub struct Database {
    /// Connections to the database.
    pub pool: PgPool,
}

impl Database {
    /// Connects to `DATABASE_URL`, or starts (or joins) the embedded cluster.
    pub async fn connect(config: &DatabaseConfig) -> anyhow::Result<Database> {
        let options = match &config.database_url {
            Some(url) => url.expose_secret().parse::<PgConnectOptions>().context("DATABASE_URL")?,
            None => anyhow::bail!("DATABASE_URL is not set (embedded PostgreSQL pending)"),
        };
        let options = session_options(options, Duration::from_millis(config.lock_timeout_ms));
        let pool = pool_options(config).connect_with(options).await?;
        Ok(Database { pool })
    }

    /// Closes the pool.
    pub async fn close(self) {
        self.pool.close().await;
    }
}

/// The pool's limits, from configuration.
pub fn pool_options(config: &DatabaseConfig) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(config.db_max_connections)
        .acquire_timeout(Duration::from_millis(config.db_acquire_timeout_ms))
}

/// Session settings every connection gets.
///
/// Why `lock_timeout`: a duplicate delivery waits on the first delivery's
/// uncommitted dedup row; the bound turns a long wait into a 503 the
/// provider retries, instead of a request that outlives its timeout.
pub fn session_options(options: PgConnectOptions, lock_timeout: Duration) -> PgConnectOptions {
    options
        .application_name("webhook-inbox")
        .options([("lock_timeout", format!("{}ms", lock_timeout.as_millis()))])
}
