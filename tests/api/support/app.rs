//! An app on a fresh database, driven in-process with `Router::oneshot`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tower::ServiceExt;
use webhook_inbox::handlers::Handlers;
use webhook_inbox::http::{AppState, Limits, app};
use webhook_inbox::providers::{ProviderConfig, Registry};

use super::database::TestDatabase;
use super::signing::{
    CLERK_SECRETS, Delivery, GITHUB_SECRETS, PADDLE_SECRETS, STANDARD_SECRETS, STANDARD_SENDER,
    STRIPE_SECRETS,
};

/// What a test may change about the app.
#[derive(Debug, Clone)]
pub struct TestConfig {
    /// Each built-in provider's secrets, by name; a provider left out is disabled.
    pub secrets: BTreeMap<&'static str, Vec<&'static str>>,
    /// `STANDARD_WEBHOOKS`, as the variable would hold it.
    pub standard_webhooks: String,
    pub max_body_bytes: usize,
    pub lock_timeout: Duration,
}

impl Default for TestConfig {
    fn default() -> Self {
        let [first, second] = STANDARD_SECRETS;
        TestConfig {
            secrets: BTreeMap::from([
                ("paddle", PADDLE_SECRETS.to_vec()),
                ("clerk", CLERK_SECRETS.to_vec()),
                ("stripe", STRIPE_SECRETS.to_vec()),
                ("github", GITHUB_SECRETS.to_vec()),
            ]),
            standard_webhooks: format!("{STANDARD_SENDER}={first},{STANDARD_SENDER}={second}"),
            max_body_bytes: 64 * 1024,
            lock_timeout: Duration::from_secs(10),
        }
    }
}

impl TestConfig {
    /// This configuration without the built-in provider `name`'s secrets.
    pub fn without(mut self, name: &str) -> Self {
        self.secrets.remove(name);
        self
    }
}

/// The app under test and the database it runs on.
pub struct TestApp {
    pub db: TestDatabase,
    pub state: AppState,
    pub router: Router,
}

/// An answer: status and JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Value,
}

impl TestApp {
    /// The default app on a fresh database.
    pub async fn spawn() -> TestApp {
        Self::spawn_with(TestConfig::default()).await
    }

    /// An app configured by `config`, on a fresh database.
    pub async fn spawn_with(config: TestConfig) -> TestApp {
        init_logs();
        let db = TestDatabase::create().await;
        let state = state_for(&db, &config).await;
        TestApp { router: app(state.clone()), state, db }
    }

    /// A second instance (own pool, own state) on the same database: a replica.
    pub async fn replica(&self) -> (AppState, Router) {
        let state = state_for(&self.db, &TestConfig::default()).await;
        (state.clone(), app(state))
    }

    /// The database every instance shares.
    pub fn pool(&self) -> &PgPool {
        self.db.pool()
    }

    /// Sends one delivery and reads the answer.
    pub async fn send(&self, delivery: &Delivery) -> Answer {
        send(&self.router, delivery).await
    }

    /// Runs a `SELECT count(*) ...` and returns the count.
    pub async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql).fetch_one(self.pool()).await.unwrap()
    }

    /// Rows in every table a delivery can write.
    pub async fn rows_everywhere(&self) -> i64 {
        self.count(
            "SELECT (SELECT count(*) FROM webhook_events) + (SELECT count(*) FROM processed_webhook_events)
                  + (SELECT count(*) FROM subscriptions) + (SELECT count(*) FROM credit_grants)
                  + (SELECT count(*) FROM users) + (SELECT count(*) FROM outbox)",
        )
        .await
    }

    /// `processing_status` of every archive row, in order of arrival.
    pub async fn archive_statuses(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT processing_status FROM webhook_events ORDER BY id")
            .fetch_all(self.pool())
            .await
            .unwrap()
    }
}

/// Sends `delivery` to `router` in-process.
pub async fn send(router: &Router, delivery: &Delivery) -> Answer {
    let mut request = Request::post(&delivery.path);
    for (name, value) in &delivery.headers {
        request = request.header(name, value);
    }
    let request = request.body(Body::from(delivery.body.clone())).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer { status, headers, body }
}

/// Logs are silent unless `TEST_LOG` is set (then `RUST_LOG` filters them).
fn init_logs() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        if std::env::var_os("TEST_LOG").is_some() {
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
            tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().init();
        }
    });
}

async fn state_for(db: &TestDatabase, config: &TestConfig) -> AppState {
    let options = webhook_inbox::db::session_options(db.connect_options(), config.lock_timeout);
    let pool = PgPoolOptions::new().max_connections(8).connect_with(options).await.unwrap();
    // The configuration goes through the same parsing and building as `serve`'s.
    let providers = ProviderConfig {
        secrets: config.secrets.iter().map(|(name, list)| (*name, list.join(",").parse().unwrap())).collect(),
        standard_webhooks: config.standard_webhooks.parse().unwrap(),
    };
    let providers = Registry::configure(&providers, 300).unwrap();
    let handlers = Handlers { price_credits: "pri_basic=100,pri_pro=500".parse().unwrap() };
    let limits = Limits { max_body_bytes: config.max_body_bytes, body_read_timeout: Duration::from_secs(5) };
    AppState::new(pool, providers, handlers, limits)
}
