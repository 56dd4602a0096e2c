//! HTTP: the routes, their answers, and the server around them.

mod admin;
mod auth;
mod console;
mod error;
mod guessing;
mod health;
mod metrics;
mod serve;
mod unknown_fields;
mod waiting;
mod webhook;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::routing::{get, post};
use sqlx::PgPool;
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::destinations::Forwarding;
use crate::event;
use crate::inbox::{RoutingTable, Workers};
use crate::monitoring::Metrics;
use crate::providers::{self, Registry};
use crate::telemetry;
pub use auth::{BearerToken, InvalidToken};
pub use console::{ConsoleSettings, SESSION_COOKIE};
pub use error::ApiError;
use guessing::Guessing;
pub use serve::{ConnectionLimits, serve};
use unknown_fields::{NoQuery, UnknownFields};

/// Bounds on what a client may send.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest accepted body.
    pub max_body_bytes: usize,
    /// Time allowed to receive the body once the headers are in.
    pub body_read_timeout: Duration,
}

/// Everything a request handler needs.
#[derive(Clone)]
pub struct AppState {
    /// The database.
    pub pool: PgPool,
    /// The enabled providers.
    pub providers: Arc<Registry>,
    /// Which events have side effects, and which: routes each delivery to its lane.
    pub routing: Arc<RoutingTable>,
    /// Bounds on request bodies.
    pub limits: Limits,
    /// The workers that run deliveries on their own connections; shutdown
    /// waits for them.
    pub workers: Workers,
    /// What `GET /metrics` shows.
    pub metrics: Arc<Metrics>,
    /// The admin API's token, which also signs in to the console; `None`:
    /// the whole `/admin` and `/console` trees answer 404.
    pub admin_token: Option<BearerToken>,
    /// How the console's sessions are kept.
    pub console: ConsoleSettings,
    /// The token `GET /metrics` requires; `None`: open.
    pub metrics_token: Option<BearerToken>,
    /// Where events are forwarded; by default nowhere.
    pub forwarding: Forwarding,
    /// Wrong operator tokens by client address, which slow that address.
    pub guessing: Arc<Guessing>,
}

impl AppState {
    /// State with no deliveries in flight yet.
    pub fn new(pool: PgPool, providers: Registry, routing: RoutingTable, limits: Limits) -> Self {
        let metrics = Metrics::new(&providers.names());
        AppState {
            workers: Workers::start(pool.clone(), metrics.batch_fallbacks()),
            metrics,
            providers: Arc::new(providers),
            routing: Arc::new(routing),
            limits,
            pool,
            admin_token: None,
            console: ConsoleSettings::default(),
            metrics_token: None,
            forwarding: Forwarding::default(),
            guessing: Arc::default(),
        }
    }

    /// Forwards events as `forwarding` says: every delivery is routed to
    /// the destinations that want its event, besides its effects.
    pub fn with_forwarding(mut self, forwarding: Forwarding) -> Self {
        if !forwarding.declaration.is_empty() {
            let routing = (*self.routing).clone().with_destinations(Arc::new(forwarding.clone()));
            self.routing = Arc::new(routing);
        }
        self.forwarding = forwarding;
        self
    }

    /// Turns the admin API on, behind `token`.
    pub fn with_admin_token(mut self, token: BearerToken) -> Self {
        self.admin_token = Some(token);
        self
    }

    /// Sets how the console keeps its sessions.
    pub fn with_console(mut self, settings: ConsoleSettings) -> Self {
        self.console = settings;
        self
    }

    /// Reads the client address of an operator request from the
    /// `X-Forwarded-For` of these proxies (and of no other peer).
    pub fn with_trusted_proxies(mut self, proxies: Vec<std::net::IpAddr>) -> Self {
        self.guessing = Arc::new(Guessing::new(proxies));
        self
    }

    /// Puts `GET /metrics` behind `token`.
    pub fn with_metrics_token(mut self, token: BearerToken) -> Self {
        self.metrics_token = Some(token);
        self
    }
}

/// The service's routes. Tests drive this in-process; `serve` puts it on a socket.
pub fn app(state: AppState) -> Router {
    // Every provider at `/webhooks/{name}`, the built-in ones also at their
    // aliases. Whether a provider is enabled is decided per request: one
    // without a secret answers 503, a name nobody configured 404.
    let mut router = Router::new().route("/webhooks/{name}", post(webhook::receive_named));
    for spec in providers::BUILT_IN {
        let name = spec.name;
        for alias in spec.aliases {
            let receive =
                move |state: State<AppState>, request: Request| webhook::receive(state, name, request);
            router = router.route(alias, post(receive));
        }
    }
    router = router
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::metrics));
    if state.admin_token.is_some() {
        router = router
            .nest("/admin", admin::router(state.clone()))
            .nest("/console", console::router(state.clone()));
    }
    router
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(request_span)
                        .on_response(DefaultOnResponse::new().level(Level::INFO))
                        // 5xx causes are logged where they are known; no second line.
                        .on_failure(()),
                )
                .layer(PropagateRequestIdLayer::x_request_id()),
        )
}

/// The request's id (set by `SetRequestIdLayer` when the client sent none),
/// if the archive keeps it ([`event::kept_request_id`]).
fn request_id(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers.get("x-request-id").and_then(|value| value.to_str().ok()).and_then(event::kept_request_id)
}

/// One span per request; provider, event_id and outcome are filled in once
/// known. It continues the trace of a caller that sent a `traceparent`.
fn request_span(request: &Request) -> tracing::Span {
    let route = request.extensions().get::<MatchedPath>().map_or("", MatchedPath::as_str);
    let request_id = request_id(request.headers()).unwrap_or("");
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        route,
        request_id,
        provider = tracing::field::Empty,
        event_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    telemetry::context::continue_from(&span, request.headers());
    span
}
