//! The operator console: server-rendered pages under `/console` to see what
//! arrived, what failed and why, and to reprocess it; and to see and steer
//! forwarding (destinations, their jobs). Mounted, like `/admin`,
//! only when `ADMIN_TOKEN` is set; signing in with that token opens a
//! session (`session.rs`).
//!
//! Safety of the pages, decided here once: every response carries a
//! Content-Security-Policy that allows no script at all and only our own
//! stylesheet; templates escape every value (`templates.rs`); every POST
//! behind the session passes the CSRF check before its handler runs.

mod actions;
mod backfill;
mod chart;
mod destinations;
mod error;
mod pages;
mod session;
mod templates;

use std::time::Duration;

use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware;
use axum::routing::{get, post};
use tower_http::set_header::SetResponseHeaderLayer;

use super::AppState;
pub use session::SESSION_COOKIE;

/// How the console's session cookie is set.
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    /// Mark the cookie `Secure`: browsers then send it over HTTPS only.
    pub secure_cookie: bool,
    /// How long a session lasts from sign-in.
    pub session_ttl: Duration,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        ConsoleSettings { secure_cookie: false, session_ttl: Duration::from_secs(8 * 3600) }
    }
}

/// No script from anywhere, styles from our stylesheet only, forms posted
/// only to us, never framed.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The `/console` routes.
pub fn router(state: AppState) -> Router<AppState> {
    let signed_in = Router::new()
        .route("/", get(pages::overview))
        .route("/events", get(pages::events))
        .route("/events/{id}", get(pages::event))
        .route("/events/{id}/payload.json", get(pages::payload))
        .route("/events/{id}/reprocess", post(actions::reprocess_one))
        .route("/reprocess", get(actions::bulk_dry_run).post(actions::bulk_run))
        .route("/destinations/{name}/pause", post(destinations::pause))
        .route("/destinations/{name}/resume", post(destinations::resume))
        .route(
            "/destinations/{name}/replay-dead",
            get(destinations::replay_dead_dry_run).post(destinations::replay_dead),
        )
        .route("/destinations/{name}/backfill", get(backfill::form).post(backfill::run))
        .route("/jobs/{id}/replay", post(destinations::replay_job))
        .route("/sign-out", post(session::sign_out))
        .layer(middleware::from_fn_with_state(state, session::require));
    let header = |name: HeaderName, value: &'static str| {
        SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value))
    };
    Router::new()
        .route("/sign-in", get(session::sign_in_form).post(session::sign_in))
        .route("/console.css", get(templates::stylesheet))
        .merge(signed_in)
        .layer(header(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .layer(header(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(header(header::X_FRAME_OPTIONS, "DENY"))
        // The URLs hold filters and event ids: never sent to another site.
        .layer(header(header::REFERRER_POLICY, "no-referrer"))
        .layer(header(header::CACHE_CONTROL, "no-store"))
}
