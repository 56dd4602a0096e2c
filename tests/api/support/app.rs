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
use webhook_inbox::client;
use webhook_inbox::destinations::{Declaration, Forwarding};
use webhook_inbox::http::{AppState, BearerToken, ConnectionLimits, Limits, app, serve};
use webhook_inbox::providers::{ProviderConfig, Registry};
use webhook_inbox::queue::Engine;

use super::database::TestDatabase;
use super::signing::{
    CLERK_SECRETS, Delivery, GITHUB_SECRETS, PADDLE_SECRETS, STANDARD_SECRETS, STANDARD_SENDER,
    STRIPE_SECRETS,
};

/// The `PADDLE_PRICE_CREDITS` of every test app (and of the CLI's reprocess);
/// `pri_unlisted` is listed as granting nothing.
pub const PRICE_CREDITS: &str = "pri_basic=100,pri_pro=500,pri_unlisted=0";

/// What a test may change about the app.
#[derive(Debug, Clone)]
pub struct TestConfig {
    /// Each built-in provider's secrets, by name; a provider left out is disabled.
    pub secrets: BTreeMap<&'static str, Vec<&'static str>>,
    /// `STANDARD_WEBHOOKS`, as the variable would hold it.
    pub standard_webhooks: String,
    pub max_body_bytes: usize,
    pub lock_timeout: Duration,
    /// `STATEMENT_TIMEOUT_MS`.
    pub statement_timeout: Duration,
    /// `ADMIN_TOKEN`; `None`: the admin API is off.
    pub admin_token: Option<&'static str>,
    /// `METRICS_TOKEN`; `None`: /metrics is open.
    pub metrics_token: Option<&'static str>,
    /// `DB_MAX_CONNECTIONS`.
    pub pool_size: u32,
    /// `DB_ACQUIRE_TIMEOUT_MS`: also how long a delivery waits for a worker.
    pub acquire_timeout: Duration,
    /// The configuration file's destinations (TOML).
    pub destinations: Option<String>,
    /// Whether their queues run in the background, as in `serve`; if not,
    /// deliveries write jobs that only a test's rounds send.
    pub send_forwards: bool,
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
            statement_timeout: webhook_inbox::db::Session::default().statement_timeout,
            admin_token: None,
            metrics_token: None,
            pool_size: 8,
            acquire_timeout: Duration::from_secs(10),
            destinations: None,
            send_forwards: true,
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
    /// The engine sending to the configured destinations, if any, kept
    /// running as long as the app.
    _forwarding: Option<Engine>,
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
        Self::spawn_on(TestDatabase::create().await, config).await
    }

    /// An app configured by `config` on `db`, migrated or not.
    pub async fn spawn_on(db: TestDatabase, config: TestConfig) -> TestApp {
        init_logs();
        let mut state = state_for(&db, &config).await;
        let engine = match &config.destinations {
            Some(toml) => {
                let declaration = Declaration::parse(toml, "test.toml", |_| None).unwrap();
                webhook_inbox::destinations::store::state::declare(&state.pool, &declaration).await.unwrap();
                let mut engine = Engine::new(state.pool.clone(), Duration::from_millis(20));
                let forwarding = match config.send_forwards {
                    true => Forwarding::start(declaration, client::build(), &mut engine, |name| {
                        state.metrics.destination(name)
                    }),
                    false => Forwarding::declared(declaration),
                };
                state = state.with_forwarding(forwarding);
                Some(engine)
            }
            None => None,
        };
        TestApp { router: app(state.clone()), state, db, _forwarding: engine }
    }

    /// A second instance (own pool, own state) on the same database: a replica.
    pub async fn replica(&self) -> (AppState, Router) {
        self.replica_with(TestConfig::default()).await
    }

    /// A replica configured by `config`.
    pub async fn replica_with(&self, config: TestConfig) -> (AppState, Router) {
        let state = state_for(&self.db, &config).await;
        (state.clone(), app(state))
    }

    /// Serves the app on a real socket (127.0.0.1, a free port), as `serve`
    /// does, until [`Listening::stop`].
    pub async fn listen(&self) -> Listening {
        self.listen_with(ConnectionLimits {
            max_connections: 128,
            header_read_timeout: Duration::from_secs(5),
        })
        .await
    }

    /// [`listen`](Self::listen), with these connection limits.
    pub async fn listen_with(&self, limits: ConnectionLimits) -> Listening {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            self.router.clone(),
            self.state.workers.clone(),
            limits,
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

    /// Sends any request and reads the answer.
    pub async fn request(&self, request: Request<Body>) -> Answer {
        request_to(&self.router, request).await
    }

    /// `GET path`, with `Authorization: Bearer <token>` when given.
    pub async fn get(&self, path: &str, token: Option<&str>) -> Answer {
        self.request(authorized(Request::get(path), token).body(Body::empty()).unwrap()).await
    }

    /// `POST path` with a JSON body, with `Authorization: Bearer <token>` when given.
    pub async fn post_json(&self, path: &str, token: Option<&str>, body: &Value) -> Answer {
        let request = authorized(Request::post(path), token).header("content-type", "application/json");
        self.request(request.body(Body::from(body.to_string())).unwrap()).await
    }

    /// `GET /metrics` as text.
    pub async fn metrics(&self) -> String {
        let response =
            self.router.clone().oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
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

    /// Makes every insert into `table` fail (an effect error an operator can
    /// fix), until [`allow_inserts_into`](Self::allow_inserts_into).
    pub async fn refuse_inserts_into(&self, table: &str) {
        let sql = format!(
            "CREATE FUNCTION refuse_{table}() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN RAISE EXCEPTION '{table} closed for maintenance'; END $$;
             CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table}
                 FOR EACH ROW EXECUTE FUNCTION refuse_{table}();"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(self.pool()).await.unwrap();
    }

    /// Undoes [`refuse_inserts_into`](Self::refuse_inserts_into): the cause is fixed.
    pub async fn allow_inserts_into(&self, table: &str) {
        let sql = format!("DROP TRIGGER refuse_{table} ON {table}; DROP FUNCTION refuse_{table}();");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(self.pool()).await.unwrap();
    }

    /// Moves archive rows `id`s `days` into the past, as if archived then
    /// (making that day's partition for those that are not FAILED).
    pub async fn age_rows(&self, ids: &[i64], days: i32) {
        let dated: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT FROM webhook_events WHERE id = ANY($1) AND processing_status <> 'FAILED')",
        )
        .bind(ids)
        .fetch_one(self.pool())
        .await
        .unwrap();
        if dated {
            make_days_back(&mut self.pool().acquire().await.unwrap(), days).await;
        }
        sqlx::query(
            "UPDATE webhook_events SET created_at = now() - make_interval(days => $2) WHERE id = ANY($1)",
        )
        .bind(ids)
        .bind(days)
        .execute(self.pool())
        .await
        .unwrap();
    }

    /// Archive ids, in order of arrival.
    pub async fn archive_ids(&self) -> Vec<i64> {
        sqlx::query_scalar("SELECT id FROM webhook_events ORDER BY id").fetch_all(self.pool()).await.unwrap()
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
    request_to(router, request.body(Body::from(delivery.body.clone())).unwrap()).await
}

/// Sends each `(router, delivery)` at the same moment (a barrier releases
/// them together); checks each is answered 200, and returns how many were
/// answered `processed` (the others: duplicates).
pub async fn processed_at_once(sends: Vec<(Router, Delivery)>) -> usize {
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(sends.len()));
    let tasks: Vec<_> = sends
        .into_iter()
        .map(|(router, delivery)| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                send(&router, &delivery).await
            })
        })
        .collect();
    let mut processed = 0;
    for task in tasks {
        let answer = task.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
        processed += usize::from(answer.body["status"] == "processed");
    }
    processed
}

/// Sends `request` to `router` in-process; the body is read as JSON (`Null` if it is not).
pub async fn request_to(router: &Router, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer { status, headers, body }
}

fn authorized(request: axum::http::request::Builder, token: Option<&str>) -> axum::http::request::Builder {
    match token {
        Some(token) => request.header("authorization", format!("Bearer {token}")),
        None => request,
    }
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
    let session = webhook_inbox::db::Session {
        lock_timeout: config.lock_timeout,
        statement_timeout: config.statement_timeout,
    };
    let options = webhook_inbox::db::session_options(db.connect_options(), session);
    let pool = PgPoolOptions::new()
        .max_connections(config.pool_size)
        .acquire_timeout(config.acquire_timeout)
        .connect_with(options)
        .await
        .unwrap();
    // The configuration goes through the same parsing and building as `serve`'s.
    let providers = ProviderConfig {
        secrets: config.secrets.iter().map(|(name, list)| (*name, list.join(",").parse().unwrap())).collect(),
        standard_webhooks: config.standard_webhooks.parse().unwrap(),
    };
    let providers = Registry::configure(&providers, 300).unwrap();
    let routing = webhook_inbox::effects::all(PRICE_CREDITS.parse().unwrap());
    let limits = Limits { max_body_bytes: config.max_body_bytes, body_read_timeout: Duration::from_secs(5) };
    let mut state = AppState::new(pool, providers, routing, limits);
    let token = |token: &str| BearerToken::new(&secrecy::SecretString::from(token)).unwrap();
    if let Some(admin) = config.admin_token {
        state = state.with_admin_token(token(admin));
    }
    if let Some(metrics) = config.metrics_token {
        state = state.with_metrics_token(token(metrics));
    }
    state
}

/// `GET path` on `router` with `cookie`: the status (a replica's pages).
pub async fn status_of(router: &Router, path: &str, cookie: &str) -> StatusCode {
    let request = Request::get(path).header("cookie", cookie).body(Body::empty()).unwrap();
    router.clone().oneshot(request).await.unwrap().status()
}

/// Makes the day partitions (of the archive and of the attempts) of the
/// day `days` ago, which a test's rows dated then need: only the days
/// around today are made ahead. On `connection`, so that a test racing
/// the retention can make them and fill them in one transaction.
pub async fn make_days_back(connection: &mut sqlx::PgConnection, days: i32) {
    let day: chrono::NaiveDate =
        sqlx::query_scalar("SELECT ((now() - make_interval(days => $1)) AT TIME ZONE 'UTC')::date")
            .bind(days)
            .fetch_one(&mut *connection)
            .await
            .unwrap();
    for table in webhook_inbox::db::partitions::ALL {
        table.create(&mut *connection, day, day).await.unwrap();
    }
}
