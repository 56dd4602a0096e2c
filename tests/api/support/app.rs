//! An app on a fresh database, driven in-process with `Router::oneshot`.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use secrecy::SecretString;
use serde_json::Value;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tower::ServiceExt;
use webhook_inbox::handlers::Handlers;
use webhook_inbox::http::{AppState, Limits, app, serve};
use webhook_inbox::providers::Registry;
use webhook_inbox::providers::clerk::Clerk;
use webhook_inbox::providers::paddle::Paddle;

use super::database::TestDatabase;
use super::signing::{CLERK_SECRETS, Delivery, PADDLE_SECRETS};

/// What a test may change about the app.
#[derive(Debug, Clone)]
pub struct TestConfig {
    pub paddle_secrets: Vec<&'static str>,
    pub clerk_secrets: Vec<&'static str>,
    pub max_body_bytes: usize,
    pub lock_timeout: Duration,
}

impl Default for TestConfig {
    fn default() -> Self {
        TestConfig {
            paddle_secrets: PADDLE_SECRETS.to_vec(),
            clerk_secrets: CLERK_SECRETS.to_vec(),
            max_body_bytes: 64 * 1024,
            lock_timeout: Duration::from_secs(10),
        }
    }
}

/// The app under test and the database it runs on.
pub struct TestApp {
    pub db: TestDatabase,
    pub state: AppState,
    pub router: Router,
}

/// The app on a real socket.
pub struct Listening {
    pub addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<bool>,
}

impl Listening {
    /// Begins shutdown: the listener closes at once.
    pub fn stop(self) -> tokio::task::JoinHandle<bool> {
        self.stop.send(()).unwrap();
        self.server
    }
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

    /// Serves the app on a real socket (127.0.0.1, a free port), as `serve`
    /// does, until [`Listening::stop`].
    pub async fn listen(&self) -> Listening {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            self.router.clone(),
            self.state.tasks.clone(),
            Duration::from_secs(5),
            async { stopped.await.unwrap_or(()) },
            Duration::from_secs(20),
        ));
        Listening { addr, stop, server }
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
                  + (SELECT count(*) FROM users)",
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
    let mut request = Request::post(delivery.path);
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
    let secrets = |list: &[&str]| list.iter().map(|s| SecretString::from(*s)).collect::<Vec<_>>();
    let mut providers = Registry::default();
    if !config.paddle_secrets.is_empty() {
        providers = providers.with(Paddle::new(&secrets(&config.paddle_secrets), 300));
    }
    if !config.clerk_secrets.is_empty() {
        providers = providers.with(Clerk::new(&secrets(&config.clerk_secrets), 300).unwrap());
    }
    let handlers = Handlers { price_credits: "pri_basic=100,pri_pro=500".parse().unwrap() };
    let limits = Limits { max_body_bytes: config.max_body_bytes, body_read_timeout: Duration::from_secs(5) };
    AppState::new(pool, providers, handlers, limits)
}
