//! The database: migrations, the connection pool and the embedded PostgreSQL default.

pub mod conversion;
pub mod embedded;
pub mod keepalive;
pub mod partitions;
mod session_lock;
pub mod statement;

pub use session_lock::SessionLock;

use std::time::{Duration, Instant};

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::config::{DEFAULT_LOCK_TIMEOUT_MS, DEFAULT_STATEMENT_TIMEOUT_MS, DatabaseConfig};
use embedded::{EmbeddedError, EmbeddedOptions, EmbeddedPostgres, STOP_TIMEOUT};
use keepalive::Keepalive;

/// How long closing waits for connections still in use to come back.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The schema migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

/// The pool, and the embedded server behind it when there is one.
pub struct Database {
    /// Connections to the database.
    pub pool: PgPool,
    embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Connects to `DATABASE_URL`, or, when it is unset, starts (or joins)
    /// the embedded cluster under `DATA_DIR`.
    pub async fn connect(config: &DatabaseConfig) -> anyhow::Result<Database> {
        let (options, embedded) = match &config.database_url {
            Some(url) => (url.expose_secret().parse::<PgConnectOptions>().context("DATABASE_URL")?, None),
            None => {
                let dir = config.data_dir.clone();
                let embedded = tokio::task::spawn_blocking(move || {
                    EmbeddedPostgres::start(&dir, &EmbeddedOptions::default())
                })
                .await?
                .context("starting the embedded PostgreSQL (or set DATABASE_URL)")?;
                (embedded.connect_options(), Some(embedded))
            }
        };
        let options = session_options(options, Session::of(config));
        let pool = with_keepalive(pool_options(config), &options, keepalive_of(config))
            .connect_with(options)
            .await
            .context("connecting to PostgreSQL")?;
        Ok(Database { pool, embedded })
    }

    /// Closes the pool, then stops the embedded server if this process owns
    /// it and nobody else uses it.
    ///
    /// Why bounded: a delivery still running after the shutdown grace period
    /// (a hung effect, a long lock wait) holds its connection; waiting for
    /// it would make the grace period no bound at all. Abandoned, its
    /// transaction rolls back when its session ends with the process.
    pub async fn close(self) {
        self.close_by(Instant::now() + CLOSE_TIMEOUT + STOP_TIMEOUT).await;
    }

    /// [`close`](Self::close), done by `deadline` (the end of `serve`'s
    /// shutdown grace period): an embedded server still stopping then was
    /// told to, and finishes its fast shutdown on its own.
    pub async fn close_by(self, deadline: Instant) {
        let pool_deadline = deadline.min(Instant::now() + CLOSE_TIMEOUT);
        if tokio::time::timeout_at(pool_deadline.into(), self.pool.close()).await.is_err() {
            tracing::warn!("closing with database connections still in use; their transactions roll back");
        }
        if let Some(embedded) = self.embedded {
            match tokio::task::spawn_blocking(move || embedded.stop_by(deadline)).await {
                Ok(Ok(())) => {}
                Ok(Err(error @ EmbeddedError::StopTimeout { .. })) => {
                    tracing::warn!(%error, "the embedded PostgreSQL finishes shutting down on its own")
                }
                Ok(Err(error)) => tracing::error!(%error, "stopping the embedded PostgreSQL"),
                Err(error) => tracing::error!(%error, "stopping the embedded PostgreSQL"),
            }
        }
    }
}

/// Fails unless every migration this build embeds has been applied: what
/// `serve --no-migrate` checks before serving on a schema it did not migrate.
pub async fn check_migrated(pool: &PgPool) -> anyhow::Result<()> {
    let applied: Vec<i64> = match sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
        .fetch_all(pool)
        .await
    {
        Ok(applied) => applied,
        // undefined_table: never migrated.
        Err(error) if error.as_database_error().and_then(|e| e.code()).as_deref() == Some("42P01") => {
            Vec::new()
        }
        Err(error) => return Err(error).context("reading the applied migrations"),
    };
    let missing: Vec<i64> = MIGRATOR
        .iter()
        .map(|migration| migration.version)
        .filter(|version| !applied.contains(version))
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "the database lacks migrations {missing:?}: run `webhook-inbox migrate` first (or serve without --no-migrate)"
    );
    Ok(())
}

/// The pool's limits, from configuration.
pub fn pool_options(config: &DatabaseConfig) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(config.db_max_connections)
        .acquire_timeout(Duration::from_millis(config.db_acquire_timeout_ms))
}

/// The keepalive settings `config` asks for.
pub fn keepalive_of(config: &DatabaseConfig) -> Keepalive {
    Keepalive {
        idle: Duration::from_secs(config.db_keepalive_idle_secs),
        interval: Duration::from_secs(config.db_keepalive_interval_secs),
        count: config.db_keepalive_count,
    }
}

/// `pool` setting `keepalive` on each TCP connection it opens to the server
/// of `options` (a unix socket has no use for it). See [`keepalive`] for why
/// after the connection is made.
pub fn with_keepalive(
    pool: PgPoolOptions,
    options: &PgConnectOptions,
    keepalive: Keepalive,
) -> PgPoolOptions {
    let host = options.get_host().to_owned();
    if options.get_socket().is_some() || host.starts_with('/') {
        return pool;
    }
    let port = options.get_port();
    pool.after_connect(move |_, _| {
        let host = host.clone();
        Box::pin(async move {
            // The connection works without them: a failure here is logged, not fatal.
            let peers: Vec<_> = match tokio::net::lookup_host((host.as_str(), port)).await {
                Ok(peers) => peers.collect(),
                Err(error) => {
                    tracing::warn!(%error, %host, "resolving the database host to set TCP keepalives");
                    return Ok(());
                }
            };
            if keepalive.apply_to_sockets_to(&peers) == 0 {
                tracing::warn!(%host, port, "found no socket to the database to set TCP keepalives on");
            }
            Ok(())
        })
    })
}

/// The bounds every database session gets.
#[derive(Debug, Clone, Copy)]
pub struct Session {
    /// How long a statement waits for a lock.
    pub lock_timeout: Duration,
    /// How long a statement may run.
    pub statement_timeout: Duration,
}

impl Session {
    /// The settings `config` asks for.
    pub fn of(config: &DatabaseConfig) -> Self {
        Session {
            lock_timeout: Duration::from_millis(config.lock_timeout_ms),
            statement_timeout: Duration::from_millis(config.statement_timeout_ms),
        }
    }
}

impl Default for Session {
    /// The configuration's defaults.
    fn default() -> Self {
        Session {
            lock_timeout: Duration::from_millis(DEFAULT_LOCK_TIMEOUT_MS),
            statement_timeout: Duration::from_millis(DEFAULT_STATEMENT_TIMEOUT_MS),
        }
    }
}

/// Session settings every connection gets.
///
/// Why `lock_timeout`: a duplicate delivery waits on the first delivery's
/// uncommitted dedup row; the bound turns a long wait into a 503 the
/// provider retries, instead of a request that outlives its timeout. Why
/// `statement_timeout` and `idle_in_transaction_session_timeout`: no
/// statement, and no transaction whose client went quiet, holds a
/// connection or its locks for ever. Why `synchronous_commit = on`: a
/// delivery is acknowledged once its `COMMIT` returns, which promises it
/// survives a crash only if the commit was flushed first; a server (or a
/// managed database's parameter group) whose default is `off` would
/// otherwise acknowledge events a crash can lose.
pub fn session_options(options: PgConnectOptions, session: Session) -> PgConnectOptions {
    let millis = |d: Duration| format!("{}ms", d.as_millis());
    options.application_name("webhook-inbox").options([
        ("synchronous_commit", "on".to_string()),
        ("lock_timeout", millis(session.lock_timeout)),
        ("statement_timeout", millis(session.statement_timeout)),
        ("idle_in_transaction_session_timeout", millis(session.statement_timeout * 2)),
    ])
}
