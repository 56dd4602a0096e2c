//! When the database cannot answer in time, the answer is 503 with
//! Retry-After (never 2xx), and nothing is half-done.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};
use webhook_inbox::handlers::Handlers;
use webhook_inbox::http::{AppState, Limits, app};
use webhook_inbox::providers::Registry;
use webhook_inbox::providers::paddle::Paddle;

use crate::support::app::{Answer, send};
use crate::support::*;

/// Opens a transaction that holds `event_id`'s dedup row uncommitted, as a
/// first delivery still in progress would.
async fn hold_dedup_row(app: &TestApp, event_id: &str) -> PgConnection {
    let mut holder = PgConnection::connect_with(&app.db.connect_options()).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(
        "INSERT INTO processed_webhook_events (provider, event_id, event_type) VALUES ('paddle', $1, 'x')",
    )
    .bind(event_id)
    .execute(&mut holder)
    .await
    .unwrap();
    holder
}

/// Waits until some session is blocked on a lock: the condition, not a guess at its timing.
pub async fn until_a_delivery_waits_on_the_lock(app: &TestApp) {
    for _ in 0..500 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
        )
        .fetch_one(app.pool())
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no delivery ever waited on the dedup row");
}

#[tokio::test]
async fn a_duplicate_waiting_past_lock_timeout_answers_503_and_the_retry_succeeds() {
    let app =
        TestApp::spawn_with(TestConfig { lock_timeout: Duration::from_millis(200), ..TestConfig::default() })
            .await;
    let mut holder = hold_dedup_row(&app, "evt_01").await;
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));

    let answer = app.send(&delivery).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        answer.body,
        json!({ "error": "a concurrent delivery of the same event is still in progress" })
    );
    assert_eq!(answer.headers["retry-after"], "5");

    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    assert_eq!(app.rows_everywhere().await, 0);
    assert_eq!(app.send(&delivery).await.body, json!({ "event_id": "evt_01", "status": "processed" }));
}

/// A delivery of `evt_01` waits on a first attempt still in progress, which
/// then ends with `end` (ROLLBACK or COMMIT); returns the app and the answer.
async fn behind_a_first_attempt_that_ends_with(end: &'static str) -> (TestApp, Answer) {
    let app = TestApp::spawn().await;
    let mut holder = hold_dedup_row(&app, "evt_01").await;
    let router = app.router.clone();
    let waiting =
        tokio::spawn(async move { send(&router, &paddle(&subscription_created("evt_01", "sub_01"))).await });

    until_a_delivery_waits_on_the_lock(&app).await;
    sqlx::raw_sql(end).execute(&mut holder).await.unwrap();
    let answer = waiting.await.unwrap();
    (app, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_waits_for_the_first_attempt_and_applies_the_event_if_it_rolled_back() {
    let (app, answer) = behind_a_first_attempt_that_ends_with("ROLLBACK").await;
    assert_eq!(answer.body, json!({ "event_id": "evt_01", "status": "processed" }));
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_waits_for_the_first_attempt_and_skips_if_it_committed() {
    let (app, answer) = behind_a_first_attempt_that_ends_with("COMMIT").await;
    assert_eq!(answer.body, json!({ "event_id": "evt_01", "idempotent": true }));
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 0);
    assert_eq!(app.archive_statuses().await, ["SKIPPED"]);
}

#[tokio::test]
async fn an_unreachable_database_answers_503_and_readiness_says_so() {
    // Nothing listens on port 1: every connection attempt is refused.
    let options = "postgres://postgres@127.0.0.1:1/none".parse().unwrap();
    let pool = PgPoolOptions::new().acquire_timeout(Duration::from_millis(300)).connect_lazy_with(options);
    let providers = Registry::default().with(Paddle::new(&[PADDLE_SECRETS[0].into()], 300));
    let limits = Limits { max_body_bytes: 65536, body_read_timeout: Duration::from_secs(5) };
    let router = app(AppState::new(pool, providers, Handlers::default(), limits));

    let answer = send(&router, &paddle(&subscription_created("evt_01", "sub_01"))).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.body, json!({ "error": "database unavailable" }));
    assert!(answer.headers.contains_key("retry-after"));

    let request = axum::http::Request::get("/readyz").body(axum::body::Body::empty()).unwrap();
    let response = tower::ServiceExt::oneshot(router, request).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn health_and_readiness_answer_when_the_database_does() {
    let app = TestApp::spawn().await;
    for (path, expected) in
        [("/healthz", json!({ "status": "ok" })), ("/readyz", json!({ "status": "ready" }))]
    {
        let request = axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap();
        let response = tower::ServiceExt::oneshot(app.router.clone(), request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&body).unwrap(), expected);
    }
}
