//! `webhook-inbox serve`: database, migrations, providers, then HTTP until a
//! shutdown signal.

use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::{DatabaseConfig, ServeConfig};
use crate::db::{self, Database};
use crate::handlers::Handlers;
use crate::http::{self, AppState, Limits};
use crate::providers::Registry;

/// Serves until SIGTERM or Ctrl-C, then drains and stops the embedded database.
pub async fn run(database: &DatabaseConfig, config: ServeConfig) -> anyhow::Result<()> {
    let providers = Registry::configure(&config.providers, config.signature_tolerance_secs)?;
    let listener = TcpListener::bind(config.listen_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen_addr))?;
    let db = Database::connect(database).await?;
    db::MIGRATOR.run(&db.pool).await.context("applying migrations")?;

    let state = AppState::new(
        db.pool.clone(),
        providers,
        Handlers { price_credits: config.paddle_price_credits.clone() },
        Limits { max_body_bytes: config.max_body_bytes, body_read_timeout: config.request_read_timeout() },
    );
    tracing::info!(
        addr = %listener.local_addr()?,
        enabled = ?state.providers.names(),
        "listening"
    );
    http::serve(
        listener,
        http::app(state.clone()),
        state.tasks.clone(),
        config.request_read_timeout(),
        shutdown_signal(),
        Duration::from_secs(config.shutdown_grace_secs),
    )
    .await;
    db.close().await;
    Ok(())
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
