//! `webhook-inbox serve`: database, migrations, providers, then HTTP until a
//! shutdown signal.

use std::time::Duration;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::{DatabaseConfig, ServeConfig};
use crate::db::{self, Database};
use crate::http::{self, AppState, BearerToken, Limits};
use crate::operations::retention;
use crate::providers::Registry;
use crate::providers::clerk::Clerk;
use crate::providers::paddle::Paddle;

/// How often retention purges the archive.
const RETENTION_EVERY: Duration = Duration::from_secs(3600);

/// Serves until SIGTERM or Ctrl-C, then drains and stops the embedded database.
pub async fn run(database: &DatabaseConfig, config: ServeConfig) -> anyhow::Result<()> {
    let providers = providers(&config)?;
    let retention = config.retention.policy()?;
    let listener = TcpListener::bind(config.listen_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen_addr))?;
    let db = Database::connect(database).await?;
    if config.no_migrate {
        db::check_migrated(&db.pool).await?;
    } else {
        db::MIGRATOR.run(&db.pool).await.context("applying migrations")?;
    }

    let mut state = AppState::new(
        db.pool.clone(),
        providers,
        config.handlers.handlers(),
        Limits { max_body_bytes: config.max_body_bytes, body_read_timeout: config.request_read_timeout() },
    );
    if let Some(token) = token(config.admin_token.as_ref(), "ADMIN_TOKEN")? {
        state = state.with_admin_token(token);
    }
    if let Some(token) = token(config.metrics_token.as_ref(), "METRICS_TOKEN")? {
        state = state.with_metrics_token(token);
    }
    tracing::info!(
        addr = %listener.local_addr()?,
        enabled = ?state.providers.names(),
        admin_api = state.admin_token.is_some(),
        "listening"
    );

    // One signal stops both the server and the background work.
    let stop = CancellationToken::new();
    let retention = retention
        .map(|policy| tokio::spawn(retention::run(db.pool.clone(), policy, RETENTION_EVERY, stop.clone())));
    let shutdown = {
        let stop = stop.clone();
        async move {
            shutdown_signal().await;
            stop.cancel();
        }
    };
    http::serve(
        listener,
        http::app(state.clone()),
        state.tasks.clone(),
        config.request_read_timeout(),
        shutdown,
        Duration::from_secs(config.shutdown_grace_secs),
    )
    .await;
    if let Some(retention) = retention {
        // A purge batch in progress finishes (it is short) before the pool closes.
        let _ = retention.await;
    }
    db.close().await;
    Ok(())
}

/// A configured bearer token; unset or empty means the endpoint's default.
fn token(secret: Option<&SecretString>, name: &str) -> anyhow::Result<Option<BearerToken>> {
    match secret.filter(|secret| !secret.expose_secret().is_empty()) {
        Some(secret) => Ok(Some(BearerToken::new(secret).context(name.to_string())?)),
        None => Ok(None),
    }
}

/// The providers with secrets configured; the others are logged as disabled.
fn providers(config: &ServeConfig) -> anyhow::Result<Registry> {
    let tolerance = config.signature_tolerance_secs;
    let mut registry = Registry::default();
    if config.paddle_webhook_secret.0.is_empty() {
        tracing::warn!("PADDLE_WEBHOOK_SECRET is not set: /billing/webhook answers 503");
    } else {
        registry = registry.with(Paddle::new(&config.paddle_webhook_secret.0, tolerance));
    }
    if config.clerk_webhook_secret.0.is_empty() {
        tracing::warn!("CLERK_WEBHOOK_SECRET is not set: /account/webhook answers 503");
    } else {
        let clerk = Clerk::new(&config.clerk_webhook_secret.0, tolerance).context("CLERK_WEBHOOK_SECRET")?;
        registry = registry.with(clerk);
    }
    Ok(registry)
}

/// Resolves on SIGTERM (how orchestrators stop a process) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => tracing::info!("Ctrl-C received"),
        _ = terminate.recv() => tracing::info!("SIGTERM received"),
    }
}
