//! `webhook-inbox serve`: the composition root. Builds the service from its
//! configuration (providers, effects, the outbox's mailer, the archive's
//! upkeep, the database, migrations), then serves HTTP until a shutdown
//! signal.

use std::time::Duration;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client;
use crate::config::{
    ConsoleConfig, DatabaseConfig, IpList, OutboxConfig, ReconcileConfig, RetentionConfig, ServeConfig,
};
use crate::db::{self, Database, partitions};
use crate::destinations::{self, Declaration, Forwarding};
use crate::http::{self, AppState, BearerToken, ConnectionLimits, ConsoleSettings, Limits};
use crate::operations::{Age, RetentionPolicy, maintenance};
use crate::outbox::{Emails, Mailer, Templates};
use crate::providers::{self, ProviderConfig, Registry};
use crate::queue::{Engine, Schedule};
use crate::reconcile::{Log, periodic};

/// How often the archive's upkeep runs (partitions ahead, retention).
const UPKEEP_EVERY: Duration = Duration::from_secs(3600);

/// Serves until SIGTERM or Ctrl-C, then drains and stops the embedded database.
pub async fn run(
    database: &DatabaseConfig,
    config: ServeConfig<ProviderConfig>,
    declaration: Declaration,
) -> anyhow::Result<()> {
    let providers = Registry::configure(&config.providers, config.signature_tolerance_secs)?;
    // The running queues' destinations are added below (`with_forwarding`).
    let routing = super::routing(&config.effects, &Declaration::default());
    let known: Vec<&str> =
        providers::BUILT_IN.iter().map(|spec| spec.name).chain(providers.names()).collect();
    declaration.check_providers(&known)?;
    let mailer = mailer(&config.outbox)?;
    let retention = retention_policy(&config.retention)?;
    let admin_token = token(config.admin_token.as_ref(), "ADMIN_TOKEN")?;
    let metrics_token = token(config.metrics_token.as_ref(), "METRICS_TOKEN")?;
    let listener = TcpListener::bind(config.listen_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen_addr))?;
    let db = Database::connect(database).await?;
    let migrated = match config.no_migrate {
        true => db::check_migrated(&db.pool).await,
        false => db::MIGRATOR.run(&db.pool).await.context("applying migrations"),
    };
    let declared = match migrated {
        Ok(()) => destinations::store::state::declare(&db.pool, &declaration)
            .await
            .context("declaring the destinations"),
        Err(error) => Err(error),
    };
    if let Err(error) = declared {
        // Stops an embedded server before giving up, rather than orphan it.
        db.close().await;
        return Err(error);
    }
    // Before the first delivery, rather than at the upkeep's first round:
    // a service stopped for longer than the days made ahead finds none for today.
    if let Err(error) = partitions::create_ahead(&db.pool).await {
        tracing::warn!(%error, "could not make the day partitions ahead (serving on the days that exist)");
    }

    let mut state = AppState::new(
        db.pool.clone(),
        providers,
        routing,
        Limits { max_body_bytes: config.max_body_bytes, body_read_timeout: config.request_read_timeout() },
    );
    if let Some(token) = admin_token {
        state = state.with_admin_token(token).with_console(console_settings(&config.console));
    }
    if let Some(IpList(proxies)) = config.trusted_proxy.clone() {
        state = state.with_trusted_proxies(proxies);
    }
    if let Some(token) = metrics_token {
        state = state.with_metrics_token(token);
    }
    let mut engine = Engine::new(db.pool.clone(), config.queues.poll_interval());
    if let Some(mailer) = mailer {
        engine.spawn(Emails::new(mailer, schedule(&config.outbox)));
    }
    let forwarding =
        Forwarding::start(declaration, client::build(), &mut engine, |name| state.metrics.destination(name));
    let destinations: Vec<String> = forwarding.declaration.iter().map(|d| d.name.clone()).collect();
    state = state.with_forwarding(forwarding);
    tracing::info!(
        addr = %listener.local_addr()?,
        enabled = ?state.providers.names(),
        ?destinations,
        admin_api_and_console = state.admin_token.is_some(),
        "listening"
    );

    // One signal stops the server and the background work at once, and
    // one deadline bounds all of it: the orchestrator's SIGKILL follows
    // its own grace period, counted from the same signal.
    let grace = Duration::from_secs(config.shutdown_grace_secs);
    let drain = grace - closing_reserve(grace);
    let stop = CancellationToken::new();
    let upkeep = tokio::spawn(maintenance::run(db.pool.clone(), retention, UPKEEP_EVERY, stop.clone()));
    let reconcilers = reconcilers(&config.reconcile, &state, &stop);
    let shutdown = {
        let stop = stop.clone();
        async move {
            shutdown_signal().await;
            stop.cancel();
        }
    };
    // In parallel with the HTTP drain: the queues claim nothing new and
    // finish the sends in flight, and the upkeep its batch or day in
    // progress, by the same deadline.
    let background = async {
        stop.cancelled().await;
        let signalled = Instant::now();
        let drained_by = signalled + drain;
        let (sends_done, ()) = tokio::join!(engine.stop(drained_by), stop_upkeep(upkeep, drained_by));
        (signalled, sends_done)
    };
    let (deliveries_done, (signalled, sends_done)) = tokio::join!(
        http::serve(
            listener,
            http::app(state.clone()),
            state.workers.clone(),
            ConnectionLimits {
                max_connections: config.max_connections as usize,
                header_read_timeout: config.request_read_timeout(),
            },
            shutdown,
            drain,
        ),
        background,
    );
    // Stopped by the same signal: a run in progress is dropped (it resumes
    // from its mark), so these end at once.
    for reconciler in reconcilers {
        let _ = reconciler.await;
    }
    db.close_by((signalled + grace).into_std()).await;
    if !(deliveries_done && sends_done) {
        tracing::error!(
            grace_secs = grace.as_secs(),
            deliveries_abandoned = !deliveries_done,
            sends_abandoned = !sends_done,
            "shutdown grace period expired with work in flight: abandoned deliveries were never acknowledged \
             (their providers retry them); abandoned sends (emails, forwards) go again when their claim expires"
        );
        anyhow::bail!("shutdown grace period expired with work in flight");
    }
    Ok(())
}

/// Starts the periodic reconciliation of every provider with an API key,
/// if `RECONCILE_INTERVAL_SECS` turns it on.
fn reconcilers(config: &ReconcileConfig, state: &AppState, stop: &CancellationToken) -> Vec<JoinHandle<()>> {
    let logs = Log::periodic(config, &client::build());
    let interval = Duration::from_secs(config.reconcile_interval_secs);
    if config.reconcile_interval_secs > 0 && logs.is_empty() {
        tracing::warn!(
            "RECONCILE_INTERVAL_SECS is set, but no provider has an API key: nothing is reconciled"
        );
    }
    logs.into_iter()
        .map(|log| {
            tracing::info!(
                provider = log.provider(),
                every_secs = interval.as_secs(),
                "reconciling periodically"
            );
            periodic::spawn(
                state.pool.clone(),
                state.routing.clone(),
                log,
                interval,
                state.metrics.clone(),
                stop.clone(),
            )
        })
        .collect()
}

/// The console's settings: how its sessions are kept.
fn console_settings(config: &ConsoleConfig) -> ConsoleSettings {
    ConsoleSettings {
        secure_cookie: config.console_secure_cookie,
        session_ttl: Duration::from_secs(config.console_session_minutes * 60),
    }
}

/// Retention's policy, or `None` when it is off.
fn retention_policy(config: &RetentionConfig) -> anyhow::Result<Option<RetentionPolicy>> {
    if config.archive_retention_days == 0 {
        return Ok(None);
    }
    let failed = Age::days(config.failed_retention_days);
    Ok(Some(RetentionPolicy::new(Age::days(config.archive_retention_days), Some(failed))?))
}

/// When a failed email is tried again, and when it is given up.
fn schedule(config: &OutboxConfig) -> Schedule {
    Schedule::doubling(
        config.outbox_max_attempts,
        Duration::from_secs(config.outbox_backoff_base_secs),
        Duration::from_secs(config.outbox_backoff_cap_secs),
    )
}

/// Of the shutdown grace period, the end kept for closing the pool and
/// stopping an embedded PostgreSQL once the drain is over: a fifth, at most 2 s.
fn closing_reserve(grace: Duration) -> Duration {
    (grace / 5).min(Duration::from_secs(2))
}

/// Waits for the upkeep to finish its batch or day in progress, until
/// `deadline`; one cut short rolls back (a detach cut short is finished by
/// the next round).
async fn stop_upkeep(mut upkeep: JoinHandle<()>, deadline: Instant) {
    if tokio::time::timeout_at(deadline, &mut upkeep).await.is_err() {
        upkeep.abort();
        tracing::warn!("shutdown grace period expired during the archive's upkeep; its batch rolls back");
    }
}

/// A configured bearer token; unset or empty means the endpoint's default.
fn token(secret: Option<&SecretString>, name: &str) -> anyhow::Result<Option<BearerToken>> {
    match secret.filter(|secret| !secret.expose_secret().is_empty()) {
        Some(secret) => {
            Ok(Some(BearerToken::new(secret).map_err(|error| anyhow::anyhow!("{name}: {error}"))?))
        }
        None => Ok(None),
    }
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
