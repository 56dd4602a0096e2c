//! `webhook-inbox serve`: database, migrations, providers, then HTTP until a
//! shutdown signal.

use std::time::Duration;

use anyhow::Context;
use secrecy::ExposeSecret;
use tokio::net::TcpListener;

use crate::config::{DatabaseConfig, OutboxConfig, ServeConfig};
use crate::db::{self, Database};
use crate::handlers::Handlers;
use crate::http::{self, AppState, Limits};
use crate::outbox::{Mailer, Templates, Worker};
use crate::providers::Registry;

/// Serves until SIGTERM or Ctrl-C, then drains and stops the embedded database.
pub async fn run(database: &DatabaseConfig, config: ServeConfig) -> anyhow::Result<()> {
    let providers = Registry::configure(&config.providers, config.signature_tolerance_secs)?;
    let mailer = mailer(&config.outbox)?;
    let listener = TcpListener::bind(config.listen_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen_addr))?;
    let db = Database::connect(database).await?;
    db::MIGRATOR.run(&db.pool).await.context("applying migrations")?;
    let poll_interval = Duration::from_millis(config.outbox.outbox_poll_interval_ms);
    let worker = mailer
        .map(|mailer| Worker::new(db.pool.clone(), mailer, config.outbox.retry(), poll_interval).spawn());

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
    // After the drain: the deliveries' emails are enqueued by now, and the
    // worker's last round finishes (or its claims expire) before the pool closes.
    if let Some(worker) = worker {
        worker.stop().await;
    }
    db.close().await;
    Ok(())
}

/// The outbox's mailer, or `None` (with a warning) without `SMTP_URL`.
fn mailer(config: &OutboxConfig) -> anyhow::Result<Option<Mailer>> {
    let Some(url) = config.smtp_url.as_ref().filter(|url| !url.expose_secret().is_empty()) else {
        tracing::warn!(
            "SMTP_URL is not set: the outbox worker is off; emails wait in the outbox until it is set"
        );
        return Ok(None);
    };
    let from = config
        .smtp_from
        .as_deref()
        .filter(|from| !from.is_empty())
        .context("SMTP_FROM is required when SMTP_URL is set")?;
    let templates = Templates::load(config.email_templates_dir.as_deref())?;
    let timeout = Duration::from_secs(config.smtp_timeout_secs);
    let mailer = Mailer::new(url, from, templates, timeout)?;
    tracing::info!(from, "outbox worker on: emails are sent over SMTP_URL");
    Ok(Some(mailer))
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
